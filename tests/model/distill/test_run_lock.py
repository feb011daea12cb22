"""One distill process per run: a second command on a run in use stops at once, saying who holds it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from k3chat_model.distill import cli
from k3chat_model.distill.pipeline import RunConfig, init_run
from k3chat_model.distill.run_lock import RunBusy, lock_path, run_lock


def test_a_second_holder_is_refused_and_the_run_is_free_again_afterwards(tmp_path) -> None:
    run = tmp_path / "runs" / "r1"  # need not exist yet: a new run's folder is made later
    with run_lock(run):
        assert lock_path(run) == tmp_path / "runs" / ".r1.lock"
        assert not run.exists()  # the lock lives beside the run, never inside it
        with pytest.raises(RunBusy, match="in use by another distill process"):
            with run_lock(tmp_path / "runs" / ".." / "runs" / "r1"):  # same run, other spelling
                pass
        with run_lock(tmp_path / "runs" / "r2"):  # another run is not affected
            pass
    assert not lock_path(run).exists()  # nothing left beside the run
    with run_lock(run):  # released when the holder is done
        pass


def test_the_cli_refuses_a_run_another_process_holds_with_a_one_line_error(
    tmp_path, capsys
) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; "
         "from k3chat_model.distill.run_lock import run_lock\n"
         f"with run_lock(Path({str(run)!r})):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        code = cli.main(["rewind", str(run), str(tmp_path / "stage2-timed.pt")])
        err = capsys.readouterr().err.strip()
        assert code == 2
        assert err.count("\n") == 0 and f"pid {holder.pid}" in err and "in use" in err
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    with run_lock(run):  # the kernel dropped the killed holder's lock
        pass


def test_status_reads_a_run_in_use(tmp_path, capsys) -> None:
    """`status` only reads, so it works while a phase runs."""
    run = tmp_path / "run"
    init_run(run, RunConfig(teacher=str(tmp_path / "teacher"), data_dir=str(tmp_path)))
    with run_lock(run):
        assert cli.main(["status", str(run)]) == 0
    out = capsys.readouterr()
    assert '"done": []' in out.out and "in use" not in out.err
