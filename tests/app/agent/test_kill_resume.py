from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from stubs.scripted_engine import ScriptedEngine

from k3chat.agent import make_agent
from k3chat.conversation import Conversation
from k3chat.session import SessionStore
from k3chat_model.events import SamplingParams

TESTS = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from stubs.scripted_engine import ScriptedEngine, call, reply
    from k3chat.agent import make_agent
    from k3chat.conversation import Conversation
    from k3chat.session import SessionStore
    from k3chat_model.events import SamplingParams

    project, sessions, pidfile = map(Path, sys.argv[1:4])
    s = SessionStore(sessions).create(model_id="scripted-k3", config_hash="scripted-hash",
                                      cwd=str(project))
    print(s.id, flush=True)
    agent = make_agent([project], mode="yolo", session_dir=s.dir)
    cmd = f"echo $$ > {pidfile}; sleep 60"
    engine = ScriptedEngine([reply("Running it.", call("run_shell", command=cmd)), "never"])
    conv = Conversation(engine, s, sampling=SamplingParams(max_tokens=64), agent=agent)
    for ev in conv.send("run the slow thing"):
        pass
    """
)


def _wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the child"
        time.sleep(0.05)


def test_kill_during_a_tool_call_then_resume_closes_the_call(project, tmp_path):
    sessions, pidfile = tmp_path / "sessions", tmp_path / "shell.pid"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(project), str(sessions), str(pidfile)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        sid = child.stdout.readline().strip()
        _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        if pidfile.exists() and pidfile.read_text().strip():
            try:  # the shell runs in its own session: reap it ourselves
                os.killpg(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    session = SessionStore(sessions).open(sid)
    logged = [json.loads(line)["type"] for line in (session.dir / "events.jsonl").open()]
    assert logged[-2:] == ["assistant", "tool_call"]

    engine = ScriptedEngine(["The command was interrupted; shall I retry?"])
    agent = make_agent([project], mode="yolo", session_dir=session.dir)
    conv = Conversation.resume(engine, session, sampling=SamplingParams(max_tokens=64), agent=agent)
    assert any("did not complete" in w for w in conv.warnings)
    [tool_msg] = [m for m in conv.messages if m.role == "tool"]
    assert tool_msg.name == "run_shell" and tool_msg.content.startswith("interrupted")
    events = list(conv.send("what happened?"))
    assert events[-1].text == "The command was interrupted; shall I retry?"
    assert (
        '<|open|>message role="tool" tool="run_shell" index="1"<|sep|>interrupted'
        in (engine.prompts[0])
    )
    types = [e["type"] for e in SessionStore(sessions).open(sid).events()]
    assert types[types.index("tool_call") :] == [
        "tool_call",
        "interrupted",
        "tool_result",
        "user",
        "assistant",
    ]
