from __future__ import annotations

from agent_helpers import call

from k3chat.agent.output import truncate


def test_long_output_is_cut_for_the_model_and_saved_whole(make_executor, tmp_path, project):
    lines = "".join(f"row {i}\n" for i in range(1, 1001))
    (project / "log.txt").write_text(lines)
    ex = make_executor(max_lines=30, max_chars=8192)
    out = ex.run(call("run_shell", command="cat log.txt"))
    assert out.saved_path == tmp_path / "session" / "tool-outputs" / "1.txt"
    assert out.saved_path.read_text() == out.full == "exit code 0\n" + lines
    assert len(out.content.splitlines()) <= 32
    assert out.content.startswith("exit code 0\nrow 1\n")
    assert out.content.endswith("row 1000\n")
    assert f"full output saved to {out.saved_path}" in out.content
    assert oct(out.saved_path.stat().st_mode & 0o777) == "0o600"
    second = ex.run(call("run_shell", command="cat log.txt"))
    assert second.saved_path.name == "2.txt"


def test_the_model_may_read_its_saved_output_without_approval(make_executor, project):
    (project / "log.txt").write_text("".join(f"row {i}\n" for i in range(500)))
    ex = make_executor("ask", None, max_lines=20)
    first = ex.run(call("read_file", path="log.txt"))
    page = ex.run(call("read_file", path=str(first.saved_path), start_line=300, end_line=302))
    assert page.ok, page.content
    assert page.content.startswith("300\t300\trow 299")


def test_character_limit_applies_to_one_huge_line():
    cut = truncate("x" * 100_000, max_chars=900, max_lines=200)
    assert cut is not None
    head, tail = cut
    assert len(head) + len(tail) <= 900


def test_short_output_is_untouched(make_executor):
    out = make_executor().run(call("run_shell", command="echo hi"))
    assert out.content == out.full == "exit code 0\nhi\n" and out.saved_path is None


def test_without_a_session_the_marker_says_nothing_was_saved(make_executor):
    out = make_executor(session_dir=None, max_lines=5).run(call("run_shell", command="seq 100"))
    assert out.saved_path is None and "full output not saved (no session)" in out.content
