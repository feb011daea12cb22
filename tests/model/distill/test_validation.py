"""`distill timed`'s selection set: replies to prompts the run never trained on, made once and
then reserved, so later data never trains on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3chat_model.distill import pipeline, validation
from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.errors import ConfigError
from k3chat_model.loading import load_model

PROMPTS = [f"Tell me about topic {c}." for c in "abcdefgh"]


@pytest.fixture
def setup(teacher_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(pipeline, "chatterbot_questions", lambda _d: PROMPTS[:4])
    monkeypatch.setattr(
        pipeline, "instruction_prompts", lambda topics=None: [] if topics else PROMPTS[4:]
    )
    monkeypatch.setattr(pipeline, "quiz_prompts", lambda: [])
    monkeypatch.setattr(validation, "VALIDATION_N", 2)
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    cfg = pipeline.RunConfig(
        teacher=str(teacher_dir), data_dir=str(tmp_path), gen_prompts=4, gen_batch=2, gen_max_new=4
    )
    return run, cfg, load_model(teacher_dir), ChatTokenizer(teacher_dir)


def test_selection_prompts_are_untrained_kept_and_never_trained_on_later(setup) -> None:
    run, cfg, teacher, tok = setup
    trained = {p for p, _ in pipeline.teacher_replies(run, cfg, teacher, tok)}
    pairs = validation.validation_pairs(run, cfg, teacher, tok)
    held = {p for p, _ in pairs}
    assert len(held) == 2 and not held & trained and all(r for _, r in pairs)
    assert validation.validation_pairs(run, cfg, None, tok) == pairs  # read back, not regenerated
    cfg.gen_prompts = 8  # asks for every prompt in the pools
    later = {p for p, _ in pipeline.teacher_replies(run, cfg, teacher, tok)}
    assert len(later) == 6 and not later & held


def test_no_prompt_left_is_a_clear_error(setup) -> None:
    run, cfg, teacher, tok = setup
    cfg.gen_prompts = 8
    pipeline.teacher_replies(run, cfg, teacher, tok)
    with pytest.raises(ConfigError, match="none is left to validate with"):
        validation.validation_pairs(run, cfg, teacher, tok)
    assert not (run / "data" / pipeline.VALIDATION_FILE).exists()
