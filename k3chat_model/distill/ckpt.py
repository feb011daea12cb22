"""Atomic checkpoints and progress lines for resumable training phases.

A checkpoint is written to a temp file in the same directory and `os.replace`d in, so a run
killed at any instant leaves either the previous or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _write_atomic(path: Path, write: Callable[[str], object]) -> None:
    """`write(tmp)` to a temp file beside `path`, then `os.replace` it in (never a torn file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_atomic(obj: Any, path: Path) -> None:
    _write_atomic(path, lambda tmp: torch.save(obj, tmp))


def copy_atomic(src: Path, dst: Path) -> None:
    _write_atomic(dst, lambda tmp: shutil.copyfile(src, tmp))


def load(path: Path) -> Any | None:
    return torch.load(path, map_location="cpu", weights_only=False) if path.exists() else None


def latest_layers_file(run: Path) -> str:
    """A run's latest finished KDA layers: stage 2's checkpoint, else stage 1b's (a run stopped
    with `run --until stage1b` is gated, exported and restored from there)."""
    return "stage2.pt" if (run / "stage2.pt").exists() else "stage1b.pt"


def read_json(path: Path) -> Any | None:
    """The JSON in `path`, or None if it does not exist; an unreadable file is a one-line
    CheckpointError naming it (it was written atomically, so only an outside edit tears it)."""
    from ..errors import CheckpointError

    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{path}: not readable JSON ({e})", hint="delete it; it is made again from the teacher"
        ) from e


def write_json(path: Path, obj: Any) -> None:
    """Atomically, making the folder if needed (a seeded run has no `data/` until a set is made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


class StopFlag:
    """Set by SIGTERM/SIGINT so a phase can checkpoint and return instead of dying mid-step."""

    def __init__(self) -> None:
        self.stop = False

    def install(self) -> StopFlag:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)
        return self

    def _handler(self, *_: object) -> None:
        self.stop = True


class Progress:
    """One line per step: tokens, loss, tokens/s and ETA; also appended as JSON to `log_path`."""

    def __init__(
        self, name: str, total_tokens: int, done_tokens: int, log_path: Path | None
    ) -> None:
        self.name, self.total, self.start_done = name, total_tokens, done_tokens
        self.t0 = time.time()
        self.log_path = log_path

    def step(self, done_tokens: int, **metrics: float) -> None:
        dt = max(time.time() - self.t0, 1e-6)
        rate = (done_tokens - self.start_done) / dt
        eta = (self.total - done_tokens) / rate if rate > 0 else float("inf")
        rec = {
            "phase": self.name,
            "tokens": done_tokens,
            "tok_s": round(rate, 1),
            "eta_s": round(eta),
            "time": time.strftime("%H:%M:%S"),
            **{k: round(v, 5) for k, v in metrics.items()},
        }
        parts = " ".join(f"{k}={v}" for k, v in rec.items() if k not in ("phase", "time"))
        print(f"[{rec['time']}] {self.name}: {parts}", file=sys.stderr, flush=True)
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")


def save_training(path, students: dict, layers, opt, state: dict, experts=None) -> None:  # noqa: ANN001
    """Checkpoint the trained KDA layers (and routed experts, if any), the optimizer and the run
    state in one atomic file."""
    from .experts import routed_state

    obj = {
        "layers": {i: students[i].state_dict() for i in layers},
        "opt": opt.state_dict(),
        "state": state,
    }
    if experts:
        obj["experts"] = {i: routed_state(moe) for i, moe in experts.items()}
    save_atomic(obj, path)
