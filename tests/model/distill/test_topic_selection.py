"""The topics selection set: teacher replies in the gate's assistant form on topics that
neither the gate nor training names, made once per run, the same for every run, and usable by
`distill attribute --set topics` and `timed`'s snapshot choice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from distill_helpers import trained_run

from k3chat_model.distill import quiz, quiz_train, timed, validation
from k3chat_model.distill.cli import main
from k3chat_model.distill.data import (
    EXTRA_TOPICS,
    FURTHER_TOPICS,
    MORE_TOPICS,
    TOPICS,
    ChatTokenizer,
)
from k3chat_model.distill.gate_data import FACTUAL, HELDOUT_TEMPLATES, HELDOUT_TOPICS
from k3chat_model.loading import load_model


def _names(topic: str, text: str) -> bool:
    """Whether `text` names `topic` (its head word, singular or plural, as a whole word)."""
    stem = topic.lower().removeprefix("the ").rstrip("s")
    return re.search(rf"\b{re.escape(stem)}s?\b", text.lower()) is not None


def test_selection_topics_are_named_by_no_gate_or_training_text() -> None:
    topics = validation.SELECTION_TOPICS
    assert len(set(topics)) == len(topics) == 48
    listed = TOPICS + MORE_TOPICS + EXTRA_TOPICS + FURTHER_TOPICS + HELDOUT_TOPICS
    questions = quiz.quiz_prompts() + quiz_train.factual_train_prompts()
    questions += [q for q, _ in FACTUAL] + list(quiz.HELDOUT_QUIZ)
    questions += [q for q, _ in quiz.HELDOUT_FACTUAL]
    for topic in topics:
        assert not [t for t in listed if _names(topic, t) or _names(t, topic)], topic
        assert not [q for q in questions if _names(topic, q)], topic


@pytest.fixture
def two_topics(monkeypatch) -> None:
    monkeypatch.setattr(validation, "SELECTION_TOPICS", ["sloths", "trams"])
    monkeypatch.setattr(validation, "TOPICS_MAX_NEW", 5)


def test_topic_replies_take_the_gates_form_are_made_once_and_alike_for_every_run(
    teacher_dir: Path, tmp_path: Path, two_topics
) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        (run / "data").mkdir(parents=True)
    teacher, tok = load_model(teacher_dir), ChatTokenizer(teacher_dir)

    pairs = validation.topic_pairs(runs[0], teacher, tok)

    want = [t.format(t=x) for x in ("sloths", "trams") for t in HELDOUT_TEMPLATES]
    assert [p for p, _ in pairs] == want and all(r for _, r in pairs)
    assert validation.topic_pairs(runs[0], None, tok) == pairs  # read back, not regenerated
    assert validation.topic_pairs(runs[1], teacher, tok) == pairs  # seeded per prompt
    for (ids, mask), (p, r) in zip(validation.topic_set(runs[0], teacher, tok), pairs, strict=True):
        scored = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert r in scored and p not in scored  # the reply alone


def test_a_run_without_a_data_folder_keeps_the_set_it_made(
    teacher_dir: Path, tmp_path: Path, two_topics
) -> None:
    """A `distill seed` run has no `data/`; the set made for it (minutes of generation) is saved."""
    run = tmp_path / "seeded"
    run.mkdir()
    teacher, tok = load_model(teacher_dir), ChatTokenizer(teacher_dir)

    pairs = validation.topic_pairs(run, teacher, tok)

    assert json.loads((run / "data" / validation.TOPICS_FILE).read_text()) == pairs


def test_attribute_on_the_topics_set_prices_every_layer_or_the_hybrid_only(
    teacher_dir: Path, tmp_path: Path, two_topics, capsys
) -> None:
    run = tmp_path / "run"
    trained_run(run, teacher_dir, [1, 2])
    assert main(["attribute", str(run), "--set", "topics", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("topics: hybrid KL")
    rep = json.loads((run / "attribution.json").read_text())
    assert sorted(r["layer"] for r in rep["topics"]["restored"]) == [1, 2]  # every layer priced
    assert rep["topics"]["hybrid"]["tokens"] > 0 and "chat" not in rep
    full = rep["topics"]["hybrid"]

    assert main(["attribute", str(run), "--set", "topics", "--hybrid-only", "--threads", "1"]) == 0

    rep = json.loads((run / "hybrid-topics.json").read_text())
    assert rep["topics"]["restored"] == []  # nothing restored: one evaluation
    assert rep["topics"]["hybrid"] == full  # the same hybrid, the same numbers
    assert (run / "attribution.json").exists()  # the full report is not overwritten
    capsys.readouterr()
    args = ["attribute", str(run), "--hybrid-only", "--add-from", str(run)]
    assert main(args) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_timed_keeps_the_snapshot_whose_worst_selection_top1_is_best() -> None:
    def res(chat: float, assistant: float, topics: float) -> dict:
        sets = {"chat": chat, "assistant": assistant, "topics": topics, "quiz": 0.0}
        return {"val": {k: {"top1": v, "kl": 0.1} for k, v in sets.items()}}

    # better chat and assistant cannot make up for a worse topics set; quiz does not count
    assert timed._score(res(0.86, 0.86, 0.84)) < timed._score(res(0.85, 0.85, 0.85))
    assert timed._score(res(0.86, 0.85, 0.86)) == (0.85, -0.1)
