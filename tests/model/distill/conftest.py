"""Fixtures: a tiny all-GQA teacher, in memory and as an official-layout checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from distill_helpers import tiny_teacher, write_teacher_checkpoint

from k3chat_model.model import K3ForCausalLM


@pytest.fixture
def teacher() -> K3ForCausalLM:
    return tiny_teacher()


@pytest.fixture
def teacher_dir(tmp_path: Path) -> Path:
    return write_teacher_checkpoint(tiny_teacher(), tmp_path / "teacher")
