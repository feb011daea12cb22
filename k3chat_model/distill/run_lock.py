"""One `k3chat model distill` process per run at a time.

Why: every phase writes its checkpoint, state and data files in place, so two processes on one
run (a `run` restarted while the old one is still saving its batch, or a `timed` started beside
a `run`) would overwrite each other's files and lose work. Session 54 restarted a data phase
while the first process was still finishing its batch after SIGTERM; both then ran on the same
run for a minute. Commands that write a run hold an advisory `flock` on a file beside it
(`runs/.NAME.lock`, outside the run so a new run's folder need not exist yet), taken without
waiting: a second command on the run stops at once with a one-line error naming the holder.
The kernel drops the lock when its process ends, however it ends, so a killed run never leaves
a stale lock behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ..errors import K3Error


class RunBusy(K3Error):
    """Another process holds the run."""


def lock_path(run: Path) -> Path:
    """The lock file for `run`: beside it, so the run's own folder stays as the pipeline made it."""
    run = run.resolve()
    return run.parent / f".{run.name}.lock"


@contextmanager
def run_lock(*runs: Path) -> Iterator[None]:
    """Hold every run in `runs` for the duration, or raise `RunBusy` at once if another process
    holds one of them. The lock file is removed on release. Where `fcntl` is missing (Windows)
    it does nothing."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with ExitStack() as stack:
        for run in dict.fromkeys(r.resolve() for r in runs):  # each once, in order
            stack.enter_context(_held(lock_path(run), run, fcntl))
        yield


@contextmanager
def _held(path: Path, run: Path, fcntl) -> Iterator[None]:  # noqa: ANN001
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        f = open(path, "a+")  # noqa: SIM115 - closed below
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise RunBusy(
                f"run {run} is in use by another distill process (pid {holder})",
                hint="wait for it to finish, or stop it (kill PID: it saves and exits)",
            ) from None
        try:  # a holder that was releasing may have removed the file we locked: lock anew
            same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    try:
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held, so no one else holds this file
        f.close()
