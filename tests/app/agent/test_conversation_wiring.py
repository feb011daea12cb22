"""The seams between Conversation, the cli and the agent executor: cancel reaches a running
tool, the executor's audit fields reach the log, "always" answers survive a resume, and
ToolStarted comes before the approval prompt."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from stubs.scripted_engine import ScriptedEngine, call, reply

from k3chat import cli
from k3chat.agent import ApprovalDecision, CallbackApprover, make_agent
from k3chat.conversation import Conversation
from k3chat.events import ToolFinished, ToolStarted, TurnEnd
from k3chat.session import SessionStore
from k3chat_model.events import SamplingParams


def _session(tmp_path: Path, project: Path):
    return SessionStore(tmp_path / "sessions").create(
        name=None, model_id="scripted-k3", config_hash="scripted-hash", cwd=str(project)
    )


def _results(session) -> list[dict]:
    return [e for e in session.events() if e["type"] == "tool_result"]


def test_cancel_during_a_shell_call_kills_it_and_ends_the_turn_interrupted(project, tmp_path):
    session = _session(tmp_path, project)
    agent = make_agent([project], mode="yolo", session=session)
    engine = ScriptedEngine([reply("", call("run_shell", command="sleep 20")), "never said"])
    conv = Conversation(engine, session, sampling=SamplingParams(max_tokens=64), agent=agent)
    cancel = threading.Event()
    start = time.monotonic()
    events = []
    for ev in conv.send("go", cancel=cancel):
        events.append(ev)
        if isinstance(ev, ToolStarted):
            threading.Timer(0.3, cancel.set).start()  # Ctrl-C while the command runs
    assert time.monotonic() - start < 8, "the shell command was not killed"
    assert events[-1].interrupted
    [result] = _results(session)
    assert result["content"].startswith("interrupted by the user") and not result["ok"]
    assert len(engine.prompts) == 1  # no further model step after the cancel


def test_tool_result_events_carry_approval_and_saved_path(project, tmp_path):
    session = _session(tmp_path, project)
    approver = CallbackApprover(lambda req: ApprovalDecision.yes())
    agent = make_agent([project], mode="ask", approver=approver, session=session)
    script = [
        reply("", call("read_file", path="README.md"), call("run_shell", command="seq 1 5000")),
        "done",
    ]
    conv = Conversation(
        ScriptedEngine(script), session, sampling=SamplingParams(max_tokens=64), agent=agent
    )
    list(conv.send("go"))
    read, shell = _results(session)
    assert (read["approval"], read["saved_path"]) == ("auto", None)
    assert shell["approval"] == "user"
    saved = Path(shell["saved_path"])
    assert saved.parent == session.dir / "tool-outputs"
    assert saved.read_text().splitlines()[-1] == "5000"
    # what the model was given is still the truncated content, not the audit fields
    assert conv.transcript.history[-2].content == shell["content"]


def test_tool_started_is_yielded_before_approval_is_asked(project, tmp_path):
    order: list[str] = []

    def decide(req):
        order.append("asked")
        return ApprovalDecision.no("not now")

    session = _session(tmp_path, project)
    agent = make_agent([project], mode="ask", approver=CallbackApprover(decide), session=session)
    script = [reply("", call("write_file", path="x.txt", content="hi")), "ok"]
    conv = Conversation(
        ScriptedEngine(script), session, sampling=SamplingParams(max_tokens=64), agent=agent
    )
    for ev in conv.send("go"):
        if isinstance(ev, ToolStarted):
            order.append("started")
        elif isinstance(ev, ToolFinished):
            order.append("denied" if ev.denied else "finished")
    assert order == ["started", "asked", "denied"]


def _app(project: Path, tmp_path: Path, script) -> cli.App:
    opts = {
        "agent": True,
        "approval_mode": "ask",
        "sessions_dir": str(tmp_path / "sessions"),
        "model": "scripted",
    }
    app = cli.App(opts)
    app.engine = ScriptedEngine(script)
    return app


def test_always_answers_survive_a_resume_through_the_cli(project, tmp_path, monkeypatch):
    monkeypatch.chdir(project)
    write = reply("", call("write_file", path="a.txt", content="one"))
    app = _app(project, tmp_path, [write, "written"])
    always = CallbackApprover(lambda req: ApprovalDecision(True, always=True))
    conv = app.make_conversation(None, approver=always)
    assert isinstance(list(conv.send("write a"))[-1], TurnEnd)
    assert (project / "a.txt").read_text() == "one"

    # a new process: resume the session with an approver that would refuse everything
    asked = []
    refuse = CallbackApprover(lambda req: asked.append(req) or ApprovalDecision.no())
    again = reply("", call("write_file", path="b.txt", content="two"))
    app2 = _app(project, tmp_path, [again, "written again"])
    resumed = app2.make_conversation(app2.store.open(conv.session_id), approver=refuse)
    list(resumed.send("write b"))
    assert asked == [] and (project / "b.txt").read_text() == "two"
    assert _results(resumed.session)[-1]["approval"] == "always"


def test_an_unknown_approval_mode_from_config_is_a_usage_error(tmp_path, monkeypatch):
    import pytest

    from k3chat.errors import UsageError

    with pytest.raises(UsageError, match="unknown approval mode 'careful'"):
        cli.make_agent({"agent": True, "approval_mode": "careful"}, None, None)
