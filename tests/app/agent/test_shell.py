from __future__ import annotations

import os
import threading
import time

from agent_helpers import call


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_shell_runs_in_the_workspace_and_reports_the_exit_code(make_executor, project):
    out = make_executor().run(call("run_shell", command="pwd; echo oops >&2; exit 3"))
    assert not out.ok
    assert out.content == f"exit code 3\n{project}\noops\n"


def test_shell_stdin_is_closed(make_executor):
    start = time.monotonic()
    out = make_executor().run(call("run_shell", command="cat; echo done", timeout=5))
    assert out.content == "exit code 0\ndone\n"
    assert time.monotonic() - start < 3


def test_shell_timeout_kills_the_whole_process_group(make_executor, tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    out = make_executor().run(
        call("run_shell", command=f"sleep 30 & echo $! > {pidfile}; echo started; wait", timeout=1)
    )
    assert time.monotonic() - start < 6
    assert not out.ok
    assert out.content.startswith("timed out after 1s; the command was killed\nstarted")
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_shell_output_is_capped_but_fully_drained(make_executor):
    ex = make_executor(shell_output_cap=1000)
    out = ex.run(call("run_shell", command="head -c 200000 /dev/zero | tr '\\0' x; echo; echo end"))
    assert out.full.startswith("exit code 0\n" + "x" * 1000)
    assert "[output capped: 199005 more bytes were discarded]" in out.full
    assert out.full.split("\n", 1)[1].count("x") == 1000


def test_a_background_child_holding_the_pipe_does_not_hang_the_call(make_executor):
    start = time.monotonic()
    out = make_executor().run(call("run_shell", command="sleep 30 & echo quick"))
    assert time.monotonic() - start < 8
    assert out.content.startswith("exit code 0\nquick")


def test_cancel_kills_a_running_command(make_executor):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    out = make_executor().run(call("run_shell", command="sleep 30"), cancel=cancel)
    assert time.monotonic() - start < 5
    assert out.content.startswith("interrupted by the user")
