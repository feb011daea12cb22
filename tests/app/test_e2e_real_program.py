"""The real program (`python -m k3chat`, the real engine, the k3-tiny checkpoint) driven as a
user would: under a pseudo-terminal in line mode, and under tmux in the Textual TUI.

No test hook is on here (no K3CHAT_FAKE_ENGINE): the model loads from disk, generates in the
child process, and Ctrl-C / kill -9 hit that process. The tiny model's weights are random, so
replies are gibberish; the tests compare what was shown with what was logged.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clihelp import REPO, k3env
from ptyproc import PtyProcess

pytestmark = pytest.mark.slow

# seed 0: the tiny model answers "hello there" with ~100 tokens (~2 s) before it stops itself
FLAGS = ["--max-tokens", "400", "--seed", "0", "--temperature", "0.8", "--no-agent"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from k3chat_model.testing import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ck") / "k3-tiny", "k3-tiny", seed=0)


def _env(home: Path, **extra: str) -> dict:
    env = k3env(home, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", **extra)
    del env["K3CHAT_FAKE_ENGINE"]  # the real engine
    return env


def _line(home: Path, model: Path, *args: str) -> PtyProcess:
    argv = [sys.executable, "-m", "k3chat", "--plain", "--model", str(model), *FLAGS, *args]
    return PtyProcess(argv, _env(home), str(home.parent))


def _events(home: Path, sid: str) -> list[dict]:
    text = (home / "sessions" / sid / "events.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def _wait_for_event(home: Path, sid: str, kind: str, timeout: float = 30) -> None:
    """Block until the session log holds an event of type `kind`."""
    deadline = time.monotonic() + timeout
    while not any(e["type"] == kind for e in _events(home, sid)):
        assert time.monotonic() < deadline, f"no {kind} event logged"
        time.sleep(0.05)


def _letters(text: str) -> str:
    """ASCII letters only: random-model text survives terminal rendering in this form."""
    return re.sub(r"[^A-Za-z]", "", ANSI.sub("", text))


def _wait_for_reply_text(p: PtyProcess, after: str, chars: int = 8, timeout: float = 20) -> str:
    """Block until at least `chars` letters of reply were streamed after the last echo of
    `after`, and return what was shown since that echo. Why the last: the input line can be
    redrawn, and a redrawn echo (or its escape codes) is not reply text."""
    p.expect(re.escape(after))
    deadline = time.monotonic() + timeout
    while len(_letters(shown := p.buffer.rsplit(after, 1)[-1])) < chars:
        assert time.monotonic() < deadline, f"no reply streamed:\n{p.transcript[-1500:]}"
        p._read(0.05)
    return shown


def test_line_mode_streams_ctrl_c_keeps_the_partial_reply_and_resume_shows_it(tmp_path, tiny_model):
    home = tmp_path / "h"
    p = _line(home, tiny_model)
    try:
        sid = p.expect("k3chat · k3-tiny · session (\\S+)", timeout=60).group(1)
        p.expect("> ")
        p.sendline("hello there")
        # Ctrl-C only once the turn has begun (the user message is on disk before generation):
        # sent while the input line was still being redrawn, it once missed the turn entirely.
        _wait_for_event(home, sid, "user")
        shown_before_ctrl_c = _wait_for_reply_text(p, "hello there")
        p.sendintr()
        p.expect(r"\[interrupted\]")
        p.expect("> ")
        p.sendline("/quit")
        sid = p.expect(r"resume with: k3chat --resume (\S+)").group(1)
        assert p.wait() == 0
        first_run = p.transcript
    finally:
        p.close()

    [user, reply] = [e for e in _events(home, sid) if e["type"] in ("user", "assistant")]
    assert user["content"] == "hello there"
    assert reply["status"] == "interrupted" and reply["content"]
    # what was on screen when Ctrl-C went out is the start of what was kept
    assert _letters(reply["content"]).startswith(_letters(shown_before_ctrl_c)[:8])
    assert _letters(reply["content"]) in _letters(first_run)
    assert "(cancelled)" in first_run and "(stop)" not in first_run

    p = _line(home, tiny_model, "--resume", sid)
    try:
        p.expect("resumed: 2 messages", timeout=60)
        p.expect("> hello there")
        p.expect(r"\[interrupted\]")
        replayed = p.transcript
        p.expect("end of history")
        p.expect("> ")
        p.sendline("/quit")
        assert p.wait() == 0
    finally:
        p.close()
    assert _letters(reply["content"]) in _letters(replayed)
    assert [e["type"] for e in _events(home, sid)][-2:] == ["user", "assistant"]  # untouched


def test_kill_9_during_generation_then_resume_and_continue(tmp_path, tiny_model):
    home = tmp_path / "h"
    p = _line(home, tiny_model)
    try:
        sid = p.expect("k3chat · k3-tiny · session (\\S+)", timeout=60).group(1)
        p.expect("> ")
        p.sendline("hello there")
        # The echo of the input can be redrawn before the turn starts; kill only once the user
        # message is on disk, as it is before generation begins.
        _wait_for_event(home, sid, "user")
        _wait_for_reply_text(p, "hello there")
        p.kill(signal.SIGKILL)
    finally:
        p.close()
    assert [e["type"] for e in _events(home, sid)][-1] == "user"  # the reply never got logged

    p = _line(home, tiny_model, "--resume", sid)
    try:
        p.expect("the last reply was cut off", timeout=60)
        p.expect("resumed: 2 messages")
        p.expect("> hello there")
        p.expect("end of history")
        p.expect("> ")
        p.sendline("go on")
        p.expect(r"generated at .* t/s \((stop|length)\)", timeout=30)
        p.expect("> ")
        p.sendline("/quit")
        assert p.wait() == 0
    finally:
        p.close()
    events = _events(home, sid)
    assert [e["type"] for e in events if e["type"] != "session"] == [
        "user",
        "interrupted",
        "assistant",
        "user",
        "assistant",
    ]
    assert events[3]["status"] == "interrupted" and events[3]["content"] == ""
    assert events[-1]["status"] == "complete" and events[-1]["content"]


# -- the Textual TUI under tmux ----------------------------------------------------------------
class Tmux:
    """One tmux server on a private socket, one window running `argv`."""

    def __init__(self, tmp: Path, argv: list[str], env: dict, cwd: Path) -> None:
        self.sock = str(tmp / "tmux.sock")
        self.env = env
        script = tmp / "run.sh"
        # the hint and the exit code land in the pane after the TUI restores the screen
        script.write_text(
            "#!/bin/sh\n" + " ".join(_sh(a) for a in argv) + '\necho "EXIT=$?"\nsleep 60\n'
        )
        script.chmod(0o755)
        self._tmux("new-session", "-d", "-x", "110", "-y", "32", "-c", str(cwd), str(script))

    def _tmux(self, *args: str) -> str:
        r = subprocess.run(
            ["tmux", "-S", self.sock, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=10,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p")

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            m = re.search(pattern, text)
            if m:
                return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"{pattern!r} not on screen:\n{text}")
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=10)


def _sh(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tui_sends_a_message_shows_the_reply_and_prints_the_resume_hint(tmp_path, tiny_model):
    home = tmp_path / "h"
    env = _env(home, PYTHONPATH=str(REPO))
    env["TERM"] = "xterm-256color"
    argv = [sys.executable, "-m", "k3chat", "--model", str(tiny_model), *FLAGS]
    tmux = Tmux(tmp_path, argv, env, home.parent)
    try:
        tmux.wait_for(r"k3-tiny", timeout=60)  # status bar: the model is loaded
        tmux.keys("-l", "hello there")
        tmux.keys("Enter")
        tmux.wait_for(r"tok/s", timeout=30)  # the status bar shows the finished turn's speed
        sid = next((home / "sessions").iterdir()).name
        reply = [e for e in _events(home, sid) if e["type"] == "assistant"][-1]
        assert reply["status"] == "complete" and reply["content"]
        screen = tmux.screen()
        assert "hello there" in screen
        words = re.findall(r"[A-Za-z]{4,}", reply["content"])
        assert any(w in screen for w in words), f"no reply words {words[:8]} on\n{screen}"
        tmux.keys("C-q")
        tmux.wait_for(r"EXIT=0", timeout=20)
        assert f"resume with: k3chat --resume {sid}" in tmux.screen()
    finally:
        tmux.close()
