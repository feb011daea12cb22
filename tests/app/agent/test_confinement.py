from __future__ import annotations

import os

import pytest
from agent_helpers import RecordingApprover, call

from k3chat.agent import ApprovalDecision, Workspace


@pytest.mark.parametrize(
    "path",
    ["../elsewhere/secret.txt", "src/../../elsewhere/secret.txt", "ABS"],
    ids=["dotdot", "nested-dotdot", "absolute"],
)
def test_paths_outside_the_workspace_need_approval_even_for_reads(make_executor, outside, path):
    path = str(outside / "secret.txt") if path == "ABS" else path
    approver = RecordingApprover(False)
    out = make_executor("ask", approver).run(call("read_file", path=path))
    assert out.denied and not out.ok
    assert "top secret" not in out.content
    [req] = approver.requests
    assert req.kind == "outside" and "outside the workspace" in req.reasons[0]


def test_symlink_escapes_are_resolved_before_the_check(make_executor, project, outside):
    os.symlink(outside / "secret.txt", project / "innocent.txt")
    os.symlink(outside, project / "linkdir")
    approver = RecordingApprover()
    ex = make_executor("auto-edit", approver)
    assert ex.run(call("read_file", path="innocent.txt")).denied
    assert ex.run(call("write_file", path="linkdir/new.txt", content="x")).denied
    assert not (outside / "new.txt").exists()
    assert [r.kind for r in approver.requests] == ["outside", "outside"]
    assert str(outside / "secret.txt") in approver.requests[0].reasons[0]


def test_glob_and_grep_do_not_follow_links_out_of_the_workspace(make_executor, project, outside):
    os.symlink(outside, project / "linkdir")
    os.symlink(outside / "secret.txt", project / "leak.txt")
    ex = make_executor("ask")
    assert ex.run(call("grep", pattern="top secret")).content == "no matches for 'top secret'"
    listed = ex.run(call("glob", pattern="**/*.txt")).content
    assert "secret" not in listed and "leak" not in listed
    assert not ex.run(call("glob", pattern="../elsewhere/*")).ok


def test_an_approved_outside_read_runs(make_executor, outside):
    approver = RecordingApprover(True)
    out = make_executor("ask", approver).run(call("read_file", path=str(outside / "secret.txt")))
    assert out.ok and "top secret" in out.content


def test_added_dirs_are_workspace_roots(make_executor, outside):
    approver = RecordingApprover()
    ex = make_executor("ask", approver, extra_roots=[outside])
    assert ex.run(call("read_file", path=str(outside / "secret.txt"))).ok
    assert approver.requests == []


def test_yolo_runs_outside_paths_without_asking(make_executor, outside):
    approver = RecordingApprover()
    out = make_executor("yolo", approver).run(call("read_file", path="../elsewhere/secret.txt"))
    assert out.ok and approver.requests == []


@pytest.mark.parametrize(
    "path",
    [".git/config", ".git/hooks/pre-commit", ".env", "deploy/server.pem", "id_rsa", "app.key"],
)
def test_git_internals_and_secrets_are_never_written_without_approval(make_executor, project, path):
    (project / ".git").mkdir()
    approver = RecordingApprover(False)
    out = make_executor("yolo", approver).run(call("write_file", path=path, content="x"))
    assert out.denied
    assert not (project / path).exists()
    assert approver.requests[0].kind == "secret"


def test_a_symlink_into_git_is_protected_too(make_executor, project):
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    os.symlink(project / ".git" / "config", project / "harmless.cfg")
    approver = RecordingApprover(False)
    make_executor("yolo", approver).run(call("write_file", path="harmless.cfg", content="x"))
    assert approver.requests[0].kind == "secret"
    assert (project / ".git" / "config").read_text() == "[core]\n"


def test_reading_secrets_and_gitignore_writes_need_no_approval(make_executor, project):
    (project / ".env").write_text("TOKEN=1\n")
    approver = RecordingApprover()
    ex = make_executor("auto-edit", approver)
    assert ex.run(call("read_file", path=".env")).ok
    assert ex.run(call("write_file", path=".gitignore", content="*.pyc\n")).ok
    assert approver.requests == []


def test_always_for_edits_does_not_cover_secret_files(make_executor, project):
    approver = RecordingApprover(ApprovalDecision.always_allow(), False)
    ex = make_executor("ask", approver)
    assert ex.run(call("write_file", path="a.txt", content="1")).ok
    assert not ex.run(call("write_file", path=".env", content="X=1")).ok
    assert [r.kind for r in approver.requests] == ["write", "secret"]


def test_workspace_resolve_reports_inside_and_protection(project, outside):
    ws = Workspace([project])
    assert ws.resolve("src/app.py").inside
    assert not ws.resolve("../elsewhere").inside
    assert ws.resolve("a/.git/HEAD").protected == "git internals"
    assert ws.resolve("~/.ssh/config").protected == "secret file"
    assert ws.resolve("notes.md").protected is None
