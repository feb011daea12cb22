"""The factual prompts used for training never ask what the gate asks."""

from __future__ import annotations

from k3chat_model.distill.gate_data import FACTUAL
from k3chat_model.distill.quiz import (
    HELDOUT_FACTUAL,
    HELDOUT_QUIZ,
    WIDE_FACTUAL,
    leaks_gate,
    quiz_prompts,
)
from k3chat_model.distill.quiz_train import MORE_QUIZ, factual_train_prompts, leaks_heldout


def test_no_gate_question_or_subject_is_a_training_prompt() -> None:
    qs = quiz_prompts()
    assert len(qs) >= 300 and len(set(qs)) == len(qs)
    gate = {q for q, _ in FACTUAL}
    assert not gate & set(qs)
    for country in ("France", "Italy", "Germany", "Japan", "Australia", "Brazil", "Mexico"):
        assert not [q for q in qs if country in q], country
    assert not [q for q in qs if "penicillin" in q or "Romeo" in q or "spider" in q]


def test_leak_check_matches_subjects_not_frames() -> None:
    assert leaks_gate("What is the capital of France?")
    assert leaks_gate("Which city is the capital of Italy?")
    assert leaks_gate("What is the currency of Japan?")
    assert leaks_gate("How many days are there in a week?")  # the exact gate question
    assert not leaks_gate("How many days are there in a year?")
    assert not leaks_gate("What is the capital of Spain?")
    assert not leaks_gate("How many legs does a dog have?")


def test_heldout_quiz_is_neither_trained_on_nor_a_gate_subject() -> None:
    assert len(HELDOUT_QUIZ) >= 40 and len(set(HELDOUT_QUIZ)) == len(HELDOUT_QUIZ)
    assert not set(HELDOUT_QUIZ) & set(quiz_prompts())
    assert not [q for q in HELDOUT_QUIZ if leaks_gate(q)]


def test_heldout_factual_questions_are_quiz_questions_with_answers() -> None:
    qs = [q for q, _ in HELDOUT_FACTUAL]
    assert len(qs) >= 30 and len(set(qs)) == len(qs) and set(qs) <= set(HELDOUT_QUIZ)
    assert all(acc and all(a == a.lower() for a in acc) for _, acc in HELDOUT_FACTUAL)


def test_wide_factual_extends_the_heldout_check_without_touching_training_or_gate() -> None:
    qs = [q for q, _ in WIDE_FACTUAL]
    assert WIDE_FACTUAL[: len(HELDOUT_FACTUAL)] == HELDOUT_FACTUAL and len(qs) >= 100
    assert len(set(qs)) == len(qs)
    assert not set(qs) & set(quiz_prompts())
    assert not [q for q in qs if leaks_gate(q)]
    # lower case, and no one-letter answer: the whole-word check would find "s" in "it's"
    assert all(
        acc and all(a == a.lower() and not (len(a) == 1 and a.isalpha()) for a in acc)
        for _, acc in WIDE_FACTUAL
    )


def test_factual_train_prompts_add_hundreds_and_leak_no_factual_check() -> None:
    qs = factual_train_prompts()
    assert len(qs) >= 700 and qs == sorted(set(qs))
    kept = {q for q in quiz_prompts() if not leaks_heldout(q)}
    assert kept <= set(qs) and len(kept) >= 300
    assert "Who painted the Sistine Chapel ceiling?" not in qs  # WIDE_FACTUAL, reworded
    assert not set(MORE_QUIZ) & set(quiz_prompts()) and len(set(MORE_QUIZ)) == len(MORE_QUIZ)
    assert all(q.endswith("?") and "\n" not in q for q in MORE_QUIZ)
    heldout = {q for q, _ in FACTUAL} | set(HELDOUT_QUIZ) | {q for q, _ in WIDE_FACTUAL}
    assert not heldout & set(qs)
    assert not [q for q in qs if leaks_gate(q)]
    added = set(qs) - set(quiz_prompts())
    assert not [q for q in qs if leaks_heldout(q)]
    assert len(added) >= len(MORE_QUIZ) - 10  # almost none of the new questions is filtered


def test_heldout_leak_check_covers_every_factual_set_both_ways() -> None:
    assert leaks_heldout("In which city is the Kremlin?")  # a WIDE_FACTUAL question
    assert leaks_heldout("Which city is home to the Kremlin?")  # its subject, rephrased
    assert leaks_heldout("What is the Kremlin?")  # its subject words all in a held-out question
    assert not leaks_gate("What is the Kremlin?")
    assert leaks_heldout("Who wrote the poem The Raven?")  # HELDOUT_QUIZ
    assert leaks_heldout("Which city is the capital of Egypt?")  # the gate's subject
    assert not leaks_heldout("What is the capital of Jordan?")
    assert not leaks_heldout("Who wrote Hamlet?")
