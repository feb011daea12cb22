"""Fixtures: a tiny all-GQA teacher, in memory and as an official-layout checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from distill_helpers import REPLY_PROMPTS, tiny_teacher, write_teacher_checkpoint

from k3chat_model.distill import pipeline
from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.loading import load_model
from k3chat_model.model import K3ForCausalLM


@pytest.fixture
def teacher() -> K3ForCausalLM:
    return tiny_teacher()


@pytest.fixture
def teacher_dir(tmp_path: Path) -> Path:
    return write_teacher_checkpoint(tiny_teacher(), tmp_path / "teacher")


@pytest.fixture
def reply_setup(teacher_dir: Path, tmp_path: Path, monkeypatch):  # noqa: ANN201
    """(run, cfg, teacher, tok) for reply generation, with `REPLY_PROMPTS` as the only pools."""
    monkeypatch.setattr(pipeline, "chatterbot_questions", lambda _d: REPLY_PROMPTS[:4])
    monkeypatch.setattr(
        pipeline, "instruction_prompts", lambda topics=None: [] if topics else REPLY_PROMPTS[4:]
    )
    monkeypatch.setattr(pipeline, "quiz_prompts", lambda: [])
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    cfg = pipeline.RunConfig(
        teacher=str(teacher_dir), data_dir=str(tmp_path), gen_prompts=4, gen_batch=2, gen_max_new=4
    )
    return run, cfg, load_model(teacher_dir), ChatTokenizer(teacher_dir)
