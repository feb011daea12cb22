"""Run `python -m k3chat` in a subprocess with an isolated home and the scripted engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def k3env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3CHAT_")}
    env.update(K3CHAT_HOME=str(home), K3CHAT_FAKE_ENGINE="1", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


def k3(
    home: Path, *args: str, input: bytes | None = None, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k3chat", *args],
        input=input if input is not None else b"",
        capture_output=True,
        cwd=str(home.parent),
        env=env or k3env(home),
        timeout=timeout,
    )
