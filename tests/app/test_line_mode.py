import json
import signal
import sys

from clihelp import k3env
from ptyproc import PtyProcess


def _spawn(home, *args, **env):
    e = k3env(home, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", **env)
    return PtyProcess([sys.executable, "-m", "k3chat", "--plain", *args], e, str(home.parent))


def _events(home, sid):
    path = home / "sessions" / sid / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_ctrl_c_stops_the_reply_keeps_it_and_resume_hint_is_printed(tmp_path):
    home = tmp_path / "h"
    p = _spawn(home, K3CHAT_FAKE_DELAY="0.05", K3CHAT_FAKE_REPLY_WORDS="60")
    try:
        p.expect("> ")
        p.sendline("one two three four five six seven eight nine ten eleven twelve thirteen")
        p.expect("Answer 1: one two three")
        p.sendintr()
        p.expect(r"\[interrupted\]")
        p.expect("> ")
        p.sendline("/help")
        p.expect("/compact")
        p.expect("> ")
        p.sendeof()
        sid = p.expect(r"resume with: k3chat --resume (\S+)").group(1)
        assert p.wait() == 0
    finally:
        p.close()
    last = [e for e in _events(home, sid) if e["type"] == "assistant"][-1]
    assert last["status"] == "interrupted"
    assert last["content"].startswith("Answer 1: one two three")
    assert len(last["content"].split()) < 20


def test_kill_9_mid_reply_leaves_a_resumable_session(tmp_path):
    home = tmp_path / "h"
    p = _spawn(home, K3CHAT_FAKE_DELAY="0.2", K3CHAT_FAKE_REPLY_WORDS="60")
    try:
        p.expect("> ")
        p.sendline("first question")
        p.expect("> ")
        p.sendline("second question with many words to stream slowly one two three four")
        p.expect("Answer 2: second")
        p.kill(signal.SIGKILL)
    finally:
        p.close()
    (sid,) = [d.name for d in (home / "sessions").iterdir()]
    p = _spawn(home, "--resume", sid[:10])
    try:
        p.expect("resumed: 4 messages")
        # the history is shown again: the first exchange, then the reply the kill cut off
        p.expect("> first question")
        p.expect("Answer 1: first")
        p.expect(r"> second question with many words")
        p.expect(r"\[interrupted\]")
        p.expect("end of history")
        p.expect("> ")
        p.sendline("third")
        p.expect("Answer 1: third")
        p.expect("> ")
        p.sendline("/quit")
        assert p.wait() == 0
    finally:
        p.close()
    types = [(e["type"], e.get("status")) for e in _events(home, sid)]
    assert ("interrupted", None) in types
    assert types[-1] == ("assistant", "complete")
    users = [e["content"] for e in _events(home, sid) if e["type"] == "user"]
    assert users[0] == "first question" and users[-1] == "third"


def test_slash_commands_rename_and_export(tmp_path):
    home = tmp_path / "h"
    out = tmp_path / "chat.md"
    p = _spawn(home)
    try:
        p.expect("> ")
        p.sendline("hello")
        p.expect("Answer 1: hello")
        p.expect("> ")
        p.sendline("/rename demo")
        p.expect("renamed")
        p.expect("> ")
        p.sendline(f"/export {out}")
        p.expect("exported")
        p.expect("> ")
        p.sendline("/model")
        p.expect("model fake")
        p.expect("> ")
        p.sendline("/quit")
        assert p.wait() == 0
    finally:
        p.close()
    assert "## User\n\nhello" in out.read_text()


def test_attached_file_goes_with_the_first_message(tmp_path):
    home = tmp_path / "h"
    (tmp_path / "doc.txt").write_text("zebra facts")
    p = _spawn(home, "-f", "doc.txt", K3CHAT_FAKE_REPLY_WORDS="3")
    try:
        p.expect("attached: doc.txt")
        p.expect("> ")
        p.sendline("summary please")
        p.expect("Answer 1: <document> ## file:")
        p.expect("> ")
        p.sendline("/quit")
        assert p.wait() == 0
    finally:
        p.close()


class _Tty:
    def isatty(self):
        return True


def test_no_color_turns_styling_off(monkeypatch):
    from k3chat.line import Style

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Style(_Tty()).dim("x") != "x"
    monkeypatch.setenv("NO_COLOR", "1")
    assert Style(_Tty()).dim("x") == "x"
