import json
import subprocess
import sys

from clihelp import REPO, k3, k3env


def test_help_and_version_do_not_import_torch():
    code = (
        "import sys, contextlib, io\n"
        "from k3chat.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "assert '--approval-mode' in buf.getvalue() and 'exit codes' in buf.getvalue()\n"
        "assert 'torch' not in sys.modules and 'textual' not in sys.modules, 'heavy import'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "k3chat", "--version"], cwd=REPO, capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.startswith("k3chat ")


def test_prompt_prints_only_the_answer_on_stdout(tmp_path):
    r = k3(tmp_path / "h", "-p", "what is two plus two")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == "Answer 1: what is two plus two\n"


def test_json_output_is_one_object_with_session_and_usage(tmp_path):
    home = tmp_path / "h"
    r = k3(home, "-p", "hi there", "--output-format", "json")
    d = json.loads(r.stdout)
    assert d["result"] == "Answer 1: hi there"
    assert d["finish_reason"] == "stop"
    assert d["usage"]["completion_tokens"] == 4
    assert set(d["timings"]) == {"total_s", "first_token_s"}
    # the session was saved and can be continued
    r2 = k3(home, "--resume", d["session_id"], "-p", "and then", "--output-format", "json")
    assert json.loads(r2.stdout)["session_id"] == d["session_id"]
    show = k3(home, "sessions", "show", d["session_id"]).stdout.decode()
    assert "hi there" in show and "and then" in show


def test_stream_json_is_one_event_per_line(tmp_path):
    r = k3(tmp_path / "h", "-p", "a b c", "--output-format", "stream-json")
    events = [json.loads(x) for x in r.stdout.decode().splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "prefill" and types[-1] == "result"
    assert "".join(e["text"] for e in events if e["type"] == "text") == "Answer 1: a b c"
    assert "stats" in types and "turn_end" in types


def test_piped_document_without_prompt_is_summarised(tmp_path):
    r = k3(tmp_path / "h", input=b"Alpha beta gamma.\n\nDelta epsilon.\n")
    assert r.returncode == 0
    assert r.stdout.decode().startswith("Answer 1: <document> Alpha beta gamma. Delta epsilon.")
    assert "read whole" in r.stderr.decode()


def test_empty_stdin_without_prompt_is_a_usage_error(tmp_path):
    r = k3(tmp_path / "h", input=b"  \n\n")
    assert r.returncode == 2
    assert r.stderr.decode().startswith("k3chat: error: nothing to do")


def test_empty_stdin_with_prompt_just_answers(tmp_path):
    r = k3(tmp_path / "h", "-p", "hello", input=b"")
    assert r.returncode == 0 and r.stdout.decode() == "Answer 1: hello\n"


def test_binary_input_is_a_clear_error(tmp_path):
    r = k3(tmp_path / "h", "-p", "x", input=b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    assert r.returncode == 1
    assert "binary" in r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()


def test_mostly_text_with_bad_bytes_is_decoded_with_a_warning(tmp_path):
    doc = ("plain text " * 500).encode() + b"\xff\xfe" + b" more text"
    r = k3(tmp_path / "h", "-p", "x", input=doc)
    assert r.returncode == 0
    assert "invalid UTF-8" in r.stderr.decode()


def test_latin1_document_is_rejected(tmp_path):
    doc = ("caf\xe9 na\xefve " * 400).encode("latin-1")
    r = k3(tmp_path / "h", "-p", "x", input=doc)
    assert r.returncode == 1 and "not UTF-8" in r.stderr.decode()


def test_unknown_session_and_bad_flags_exit_codes(tmp_path):
    r = k3(tmp_path / "h", "--resume", "nope", "-p", "x")
    assert r.returncode == 1 and "no session matches" in r.stderr.decode()
    r = k3(tmp_path / "h", "--temperature", "hot")
    assert r.returncode == 2 and r.stderr.decode().startswith("k3chat: error:")


def test_env_and_config_precedence(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text("max_tokens = 3\n")
    r = k3(home, "-p", "one two three four five")
    assert r.stdout.decode() == "Answer 1: one\n"
    r = k3(home, "-p", "one two three four five", env=k3env(home, K3CHAT_MAX_TOKENS="4"))
    assert r.stdout.decode() == "Answer 1: one two\n"
    r = k3(
        home,
        "-p",
        "one two three four five",
        "--max-tokens",
        "5",
        env=k3env(home, K3CHAT_MAX_TOKENS="4"),
    )
    assert r.stdout.decode() == "Answer 1: one two three\n"


def test_no_save_writes_no_session(tmp_path):
    home = tmp_path / "h"
    r = k3(home, "-p", "x", "--no-save", "--output-format", "json")
    assert json.loads(r.stdout)["session_id"] is None
    assert not (home / "sessions").exists()


def test_continue_picks_newest_session_in_cwd(tmp_path):
    home = tmp_path / "h"
    first = json.loads(k3(home, "-p", "one", "--output-format", "json").stdout)["session_id"]
    r = k3(home, "-c", "-p", "two", "--output-format", "json")
    assert json.loads(r.stdout)["session_id"] == first


def test_sessions_subcommands(tmp_path):
    home = tmp_path / "h"
    sid = json.loads(k3(home, "-p", "hello", "--output-format", "json").stdout)["session_id"]
    assert sid in k3(home, "sessions", "list").stdout.decode()
    assert k3(home, "sessions", "rename", sid[:12], "mine").returncode == 0
    exported = json.loads(k3(home, "sessions", "export", "mine", "--format", "json").stdout)
    assert exported["meta"]["name"] == "mine"
    assert [e["type"] for e in exported["events"]] == ["session", "user", "assistant"]
    assert k3(home, "sessions", "rm", "mine").returncode == 0
    assert k3(home, "sessions", "show", sid).returncode == 1


def test_broken_pipe_is_quiet(tmp_path):
    env = k3env(tmp_path / "h", K3CHAT_FAKE_REPLY_WORDS="5000", K3CHAT_FAKE_CONTEXT="50000")
    words = " ".join(["w"] * 5000)
    p = subprocess.Popen(
        f"{sys.executable} -m k3chat -p '{words}' --max-tokens 6000 | head -c 10",
        shell=True,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = p.communicate(timeout=60)
    assert out == b"Answer 1: "
    assert b"Traceback" not in err


def _script(*items):
    return json.dumps(list(items))


def test_agent_one_shot_runs_read_tools_and_denies_writes_without_a_terminal(tmp_path):
    home = tmp_path / "h"
    (tmp_path / "notes.txt").write_text("the secret word is plum\n")
    script = _script(
        [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
        [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}],
        "done",
    )
    env = k3env(home, K3CHAT_FAKE_SCRIPT=script)
    r = k3(home, "--agent", "-p", "read notes", "--output-format", "stream-json", env=env)
    assert r.returncode == 0, r.stderr
    events = [json.loads(x) for x in r.stdout.decode().splitlines()]
    results = [e for e in events if e["type"] == "tool_result"]
    assert results[0]["name"] == "read_file" and results[0]["ok"]
    assert "plum" in results[0]["output"]
    assert results[1]["name"] == "write_file" and results[1]["denied"]
    assert not (tmp_path / "out.txt").exists()
    assert events[-1]["result"] == "done"


def test_agent_one_shot_auto_edit_mode_lets_writes_run(tmp_path):
    home = tmp_path / "h"
    script = _script(
        [{"name": "write_file", "arguments": {"path": "out.txt", "content": "hello\n"}}], "ok"
    )
    r = k3(
        home,
        "--agent",
        "--approval-mode",
        "auto-edit",
        "-p",
        "write",
        env=k3env(home, K3CHAT_FAKE_SCRIPT=script),
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_text() == "hello\n"
