"""The agent loop end to end: real Conversation, Session and executor; model choices scripted
but streamed as real K3 XTML tokens through the real parser."""

from __future__ import annotations

from pathlib import Path

from stubs.scripted_engine import Raw, ScriptedEngine, call, reply

from k3chat.agent import ApprovalDecision, CallbackApprover, make_agent
from k3chat.conversation import Conversation
from k3chat.events import ToolFinished, TurnEnd
from k3chat.session import SessionStore
from k3chat_model.events import SamplingParams, ToolCallParsed

CALL_HEAD = "<|close|>response<|sep|><|open|>tools<|sep|>"


def _run(project: Path, tmp_path: Path, script, *, mode="auto-edit", approver=None, text="go"):
    session = SessionStore(tmp_path / "sessions").create(
        model_id="scripted-k3", config_hash="scripted-hash", cwd=str(project)
    )
    agent = make_agent([project], mode=mode, approver=approver, session=session)
    engine = ScriptedEngine(script)
    conv = Conversation(engine, session, sampling=SamplingParams(max_tokens=256), agent=agent)
    events = list(conv.send(text))
    return engine, session, conv, events


def _results(session):
    return [e for e in session.events() if e["type"] == "tool_result"]


def test_multi_step_read_then_edit_then_answer(project, tmp_path):
    script = [
        reply("Let me look.", call("read_file", path="src/app.py")),
        reply(
            "", call("edit_file", path="src/app.py", old_string="return 1", new_string="return 2")
        ),
        "Done: main() now returns 2.",
    ]
    engine, session, conv, events = _run(project, tmp_path, script)
    assert (project / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert events[-1] == TurnEnd("Done: main() now returns 2.", False, "stop")
    types = [e["type"] for e in session.events() if e["type"] != "session"]
    assert types == [
        "user",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    # the tools were declared to the model in K3's own format, and results came back in it
    assert 'type="tool-declare"' in engine.prompts[0] and '"name":"edit_file"' in engine.prompts[0]
    assert (
        '<|open|>message role="tool" tool="read_file" index="1"<|sep|>1\tdef main():'
        in (engine.prompts[1])
    )
    assert "+    return 2" in engine.prompts[2]


def test_parallel_calls_run_in_order_and_answer_by_index(project, tmp_path):
    script = [
        reply(
            "", call("list_dir"), call("grep", pattern="hello"), call("read_file", path="README.md")
        ),
        "Three results read.",
    ]
    engine, session, conv, events = _run(project, tmp_path, script)
    parsed = [e.call for e in events if isinstance(e, ToolCallParsed)]
    assert [(c.name, c.index) for c in parsed] == [("list_dir", 1), ("grep", 2), ("read_file", 3)]
    results = _results(session)
    assert [(r["name"], r["tool_index"], r["ok"]) for r in results] == [
        ("list_dir", 1, True),
        ("grep", 2, True),
        ("read_file", 3, True),
    ]
    assert results[1]["content"] == "README.md:2: hello world"
    prompt = engine.prompts[1]
    assert (
        prompt.index('tool="list_dir" index="1"')
        < prompt.index('tool="grep" index="2"')
        < (prompt.index('tool="read_file" index="3"'))
    )


def test_malformed_calls_get_error_results_and_the_loop_continues(project, tmp_path):
    bad_number = (
        CALL_HEAD + '<|open|>call tool="read_file" index="1"<|sep|>'
        '<|open|>argument key="path" type="string"<|sep|>README.md<|close|>argument<|sep|>'
        '<|open|>argument key="start_line" type="number"<|sep|>two<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
    )
    unterminated = (
        CALL_HEAD + '<|open|>call tool="list_dir" index="1"<|sep|><|open|>argument key="pa'
    )
    script = [
        Raw(bad_number),
        reply("", call("read_file")),  # well formed, but misses a required argument
        Raw(unterminated),
        "I could not call the tools correctly.",
    ]
    engine, session, conv, events = _run(project, tmp_path, script)
    results = _results(session)
    assert len(results) == 3 and not any(r["ok"] for r in results)
    assert "invalid argument 'start_line' (number)" in results[0]["content"]
    assert results[1]["content"] == (
        "error: invalid arguments for read_file: missing required argument 'path'"
    )
    assert "unterminated tool call" in results[2]["content"]
    assert "missing required argument 'path'" in engine.prompts[2]
    assert events[-1].text == "I could not call the tools correctly."


def test_denial_with_feedback_is_what_the_model_reads_next(project, tmp_path):
    approver = CallbackApprover(lambda req: ApprovalDecision.no("do not touch README"))
    script = [reply("", call("write_file", path="README.md", content="gone")), "Understood."]
    engine, session, conv, events = _run(project, tmp_path, script, mode="ask", approver=approver)
    assert (project / "README.md").read_text() == "# demo\nhello world\n"
    [fin] = [e for e in events if isinstance(e, ToolFinished)]
    assert fin.denied and not fin.ok
    assert "The user says: do not touch README" in engine.prompts[1]


def test_read_only_mode_lets_the_agent_plan_but_not_act(project, tmp_path):
    script = [
        reply("", call("read_file", path="src/app.py"), call("run_shell", command="touch hacked")),
        "Plan: change the return value.",
    ]
    _, session, _, _ = _run(project, tmp_path, script, mode="read-only")
    ok = [(r["name"], r["ok"], r["denied"]) for r in _results(session)]
    assert ok == [("read_file", True, False), ("run_shell", False, True)]
    assert not (project / "hacked").exists()


def test_large_tool_output_is_truncated_for_the_model_and_kept_in_the_session(project, tmp_path):
    script = [reply("", call("run_shell", command="seq 1 5000")), "Counted."]
    engine, session, _, _ = _run(project, tmp_path, script, mode="yolo")
    [result] = _results(session)
    saved = session.dir / "tool-outputs" / "1.txt"
    assert saved.read_text().splitlines()[-1] == "5000"
    assert f"full output saved to {saved}" in result["content"]
    assert len(result["content"]) <= 8192 + 400
    assert "\n2500\n" not in engine.prompts[1]


def test_always_answers_are_kept_in_the_session_across_resume(project, tmp_path):
    asked = []

    def answer(req):
        asked.append(req.tool)
        return ApprovalDecision.always_allow()

    script = [reply("", call("run_shell", command="echo one")), "ok"]
    _, session, _, _ = _run(
        project, tmp_path, script, mode="ask", approver=CallbackApprover(answer)
    )
    reopened = SessionStore(tmp_path / "sessions").open(session.id)
    assert reopened.meta["always_allowed"] == ["run_shell"]
    agent = make_agent([project], mode="ask", approver=CallbackApprover(answer), session=reopened)
    engine = ScriptedEngine([reply("", call("run_shell", command="echo two")), "ok"])
    conv = Conversation.resume(
        engine, reopened, sampling=SamplingParams(max_tokens=64), agent=agent
    )
    list(conv.send("again"))
    assert asked == ["run_shell"]
    assert _results(reopened)[-1]["content"] == "exit code 0\ntwo\n"
