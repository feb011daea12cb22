"""The house style as a test: `ruff check` and `ruff format --check` stay clean.

Why a test: CI runs only the README's pytest command, so a lint or format slip would otherwise
land unnoticed (37 files had drifted from `ruff format` before this check existed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("ruff", reason="ruff comes with the dev install (scripts/setup.sh --dev)")


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff_is_clean(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, (
        f"ruff {' '.join(args)} found problems:\n{done.stdout}{done.stderr}"
    )
