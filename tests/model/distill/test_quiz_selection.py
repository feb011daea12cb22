"""The quiz selection set: the teacher's greedy answers to held-out one-line questions, made
once per run, scored on the answer tokens, and usable by `distill attribute --set quiz`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from distill_helpers import trained_run

from k3chat_model.distill import validation
from k3chat_model.distill.cli import main
from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.loading import load_model

QUESTIONS = ["What is the capital of Nepal?", "Who wrote The Raven?", "What is 9 times 7?"]


@pytest.fixture
def few_questions(monkeypatch) -> None:
    monkeypatch.setattr(validation, "HELDOUT_QUIZ", QUESTIONS)
    monkeypatch.setattr(validation, "QUIZ_MAX_NEW", 5)


@pytest.fixture
def quiz_run(teacher_dir: Path, tmp_path: Path, few_questions):  # noqa: ANN201
    """(run folder with an empty data/, teacher, tokenizer)."""
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    return run, load_model(teacher_dir), ChatTokenizer(teacher_dir)


def test_quiz_answers_are_greedy_made_once_and_scored_on_the_answer(
    quiz_run, tmp_path: Path
) -> None:
    run, teacher, tok = quiz_run

    pairs = validation.quiz_pairs(run, teacher, tok)

    assert [q for q, _ in pairs] == QUESTIONS and all(a for _, a in pairs)
    assert validation.quiz_pairs(run, None, tok) == pairs  # read back, not regenerated
    fresh = tmp_path / "fresh"
    (fresh / "data").mkdir(parents=True)
    assert validation.quiz_pairs(fresh, teacher, tok) == pairs  # greedy: same answers
    for (ids, mask), (q, a) in zip(validation.quiz_set(run, teacher, tok), pairs, strict=True):
        scored = [t for t, m in zip(ids, mask, strict=True) if m]
        assert a in tok.decode(scored) and q not in tok.decode(scored)  # the answer alone


def test_attribute_on_the_quiz_set_prices_every_layer_and_writes_its_report(
    teacher_dir: Path, tmp_path: Path, few_questions, capsys
) -> None:
    run = tmp_path / "run"
    trained_run(run, teacher_dir, [1, 2])

    assert main(["attribute", str(run), "--set", "quiz", "--threads", "1"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("quiz: hybrid KL") and re.search(r"held-out factual \d+/32", out)
    assert "factual gain" in out
    rep = json.loads((run / "attribution.json").read_text())
    assert set(rep) >= {"quiz", "layers"} and "chat" not in rep
    rows = rep["quiz"]["restored"]
    assert sorted(r["layer"] for r in rows) == [1, 2]
    # With every KDA layer restored but one, greedy decoding ran through a mixed cache.
    base = rep["quiz"]["hybrid"]["factual"]
    assert all(r["factual_gain"] == r["factual"] - base for r in rows)
    assert rep["quiz"]["hybrid"]["tokens"] > 0
    assert len(json.loads((run / "data" / validation.QUIZ_FILE).read_text())) == 3


def test_quiz_agreement_is_full_for_the_teacher_and_falls_for_a_damaged_model(
    quiz_run, teacher_dir: Path
) -> None:
    run, teacher, tok = quiz_run
    pairs = validation.quiz_pairs(run, teacher, tok)
    assert validation.quiz_agreement(teacher, tok, pairs, n=4) == 1.0
    damaged = load_model(teacher_dir)
    with torch.no_grad():
        damaged.lm_head.weight.copy_(torch.roll(damaged.lm_head.weight, 1, dims=0))
    assert validation.quiz_agreement(damaged, tok, pairs, n=4) < 1.0


def test_a_torn_quiz_file_is_a_one_line_error_and_is_left_as_it_was(
    teacher_dir: Path, tmp_path: Path, few_questions, capsys
) -> None:
    run = tmp_path / "run"
    trained_run(run, teacher_dir, [1])
    torn = run / "data" / validation.QUIZ_FILE
    torn.write_text('[["What is the capital of Nepal?", "The cap')

    assert main(["attribute", str(run), "--set", "quiz", "--threads", "1"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("k3chat: error:") and "val_quiz.json" in err and err.count("\n") == 1
    assert torn.read_text().endswith('"The cap')
