from __future__ import annotations

import pytest
from agent_helpers import RecordingApprover, call

from k3chat.agent import ApprovalDecision, AutoApprover, CallbackApprover, normalize_mode

READ = call("read_file", path="README.md")
WRITE = call("write_file", path="out.txt", content="hi\n")
SHELL = call("run_shell", command="echo ran")

# (mode, tool) -> "run" without asking | "ask" | "deny" without asking
POLICY = {
    ("read-only", "read"): "run",
    ("read-only", "write"): "deny",
    ("read-only", "shell"): "deny",
    ("ask", "read"): "run",
    ("ask", "write"): "ask",
    ("ask", "shell"): "ask",
    ("auto-edit", "read"): "run",
    ("auto-edit", "write"): "run",
    ("auto-edit", "shell"): "ask",
    ("yolo", "read"): "run",
    ("yolo", "write"): "run",
    ("yolo", "shell"): "run",
}


@pytest.mark.parametrize("mode,kind", list(POLICY), ids=[f"{m}-{k}" for m, k in POLICY])
def test_each_mode_runs_asks_or_denies_by_tool_kind(make_executor, project, mode, kind):
    the_call = {"read": READ, "write": WRITE, "shell": SHELL}[kind]
    approver = RecordingApprover(True)
    out = make_executor(mode, approver).run(the_call)
    expected = POLICY[(mode, kind)]
    assert len(approver.requests) == (1 if expected == "ask" else 0)
    if expected == "deny":
        assert out.denied and "read-only (plan) mode" in out.content
        assert not (project / "out.txt").exists()
    else:
        assert out.ok, out.content
        assert out.approval == ("user" if expected == "ask" else "auto")
    if expected == "ask":
        assert approver.requests[0].kind == kind


def test_the_write_request_carries_the_diff(make_executor):
    approver = RecordingApprover(True)
    make_executor("ask", approver).run(
        call("edit_file", path="src/app.py", old_string="return 1", new_string="return 42")
    )
    [req] = approver.requests
    assert req.summary == "edit_file src/app.py"
    assert "-    return 1\n+    return 42" in req.diff


def test_the_shell_request_carries_the_command(make_executor):
    approver = RecordingApprover(False)
    make_executor("auto-edit", approver).run(SHELL)
    assert approver.requests[0].diff == "echo ran"
    assert approver.requests[0].summary == "run_shell: echo ran"


def test_a_call_that_would_fail_is_not_shown_to_the_user(make_executor):
    approver = RecordingApprover(True)
    out = make_executor("ask", approver).run(
        call("edit_file", path="src/app.py", old_string="absent", new_string="x")
    )
    assert not out.ok and approver.requests == []


def test_no_with_feedback_reaches_the_model(make_executor, project):
    approver = RecordingApprover(ApprovalDecision.no("use pathlib instead"))
    out = make_executor("ask", approver).run(WRITE)
    assert out.denied and not (project / "out.txt").exists()
    assert out.content == (
        "denied by the user: write_file create out.txt (3 chars)\nThe user says: use pathlib instead"
    )


def test_always_is_remembered_for_the_session_and_reported(make_executor):
    saved: list[set[str]] = []
    approver = RecordingApprover(ApprovalDecision.always_allow())
    ex = make_executor("ask", approver, on_always=lambda s: saved.append(set(s)))
    assert ex.run(WRITE).approval == "user"
    second = ex.run(call("write_file", path="b.txt", content="x"))
    assert second.ok and second.approval == "always"
    assert len(approver.requests) == 1
    assert ex.always_allowed == {"write_file"} and saved == [{"write_file"}]
    # shell is another tool: still asks
    assert ex.run(SHELL).denied and len(approver.requests) == 2


def test_always_allowed_restored_from_a_session_skips_the_prompt(make_executor):
    approver = RecordingApprover()
    ex = make_executor("ask", approver, always_allowed={"run_shell"})
    assert ex.run(SHELL).ok and approver.requests == []


def test_one_shot_approver_denies_by_default(make_executor):
    approver = AutoApprover()
    out = make_executor("ask", approver).run(SHELL)
    assert out.denied and "wider --approval-mode" in out.content
    assert [r.tool for r in approver.requests] == ["run_shell"]
    assert make_executor("ask", AutoApprover(True)).run(SHELL).ok


def test_no_approver_means_no(make_executor):
    assert make_executor("ask", None).run(WRITE).denied


def test_callback_approver_accepts_plain_booleans(make_executor):
    seen = []
    approver = CallbackApprover(lambda req: seen.append(req.kind) or True)
    assert make_executor("ask", approver).run(WRITE).ok and seen == ["write"]


def test_mode_can_change_mid_session_and_plan_is_read_only(make_executor):
    ex = make_executor("plan")
    assert ex.mode == "read-only" and ex.run(WRITE).denied
    ex.mode = "yolo"
    assert ex.run(WRITE).ok
    with pytest.raises(ValueError, match="unknown approval mode 'careful'"):
        normalize_mode("careful")
