"""`distill timed`'s selection set: replies to prompts the run never trained on, made once and
then reserved, so later data never trains on them."""

from __future__ import annotations

import pytest

from k3chat_model.distill import pipeline, validation
from k3chat_model.errors import ConfigError


@pytest.fixture
def setup(reply_setup, monkeypatch):  # noqa: ANN201
    monkeypatch.setattr(validation, "VALIDATION_N", 2)
    return reply_setup


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
