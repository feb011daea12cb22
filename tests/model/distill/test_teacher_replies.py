"""Teacher replies are saved batch by batch: a killed run keeps them, a larger budget adds to them.
Student (on-policy) replies come from the hybrid exactly as it would ship."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distill_helpers import REPLY_PROMPTS, StopAfter

from k3chat_model.distill import ckpt, pipeline
from k3chat_model.distill.gate import delta_student
from k3chat_model.distill.generate import generate
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.events import SamplingParams

PROMPTS = REPLY_PROMPTS


@pytest.fixture
def setup(reply_setup):  # noqa: ANN201
    return reply_setup


def _saved(run: Path) -> list[list[str]]:
    return json.loads((run / "data" / "teacher_replies.json").read_text())


def test_killed_generation_keeps_finished_batches_and_resumes(setup) -> None:
    run, cfg, teacher, tok = setup
    assert pipeline.teacher_replies(run, cfg, teacher, tok, StopAfter(1)) is None
    first = _saved(run)
    assert len(first) == 2  # one batch finished and was saved before the stop
    replies = pipeline.teacher_replies(run, cfg, teacher, tok)
    assert len(replies) == 4 and replies[:2] == first and _saved(run) == replies


def test_larger_budget_generates_only_new_prompts(setup) -> None:
    run, cfg, teacher, tok = setup
    before = pipeline.teacher_replies(run, cfg, teacher, tok)
    cfg.gen_prompts = 7
    after = pipeline.teacher_replies(run, cfg, teacher, tok)
    assert after[:4] == before and len(after) == 7
    prompts = [p for p, _ in after]
    assert len(set(prompts)) == 7 and set(prompts) <= set(PROMPTS)
    assert pipeline.teacher_replies(run, cfg, teacher, tok) == after  # nothing left to do


def test_quiz_questions_are_a_quarter_of_the_pool_unless_the_others_run_out(
    setup, monkeypatch
) -> None:
    """Stage 2 must see paragraph replies (what the gate's assistant check scores), not only
    one-line answers: before, a pool smaller than the quiz list was all quiz answers."""
    run, cfg, teacher, tok = setup
    quiz = [f"What is the capital of country {c}?" for c in "pqrstuvw"]
    monkeypatch.setattr(pipeline, "quiz_prompts", lambda: quiz)
    cfg.gen_prompts = 8
    prompts = [p for p, _ in pipeline.teacher_replies(run, cfg, teacher, tok)]
    assert len(set(prompts)) == 8
    assert sum(p in quiz for p in prompts) == 2 and sum(p in PROMPTS for p in prompts) == 6
    cfg.gen_prompts = 14  # 2 more of the other pools, then quiz questions fill the rest
    prompts = [p for p, _ in pipeline.teacher_replies(run, cfg, teacher, tok)]
    assert len(set(prompts)) == 14 and set(PROMPTS) <= set(prompts)
    assert sum(p in quiz for p in prompts) == 6


def test_student_replies_are_the_shipped_hybrids_greedy_answers(setup) -> None:
    run, cfg, teacher, tok = setup
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    kda = init_kda_from_gqa(teacher.model.layers[1].self_attn, kcfg, 1)
    state = {"done": True, "tokens": 0}
    ckpt.save_atomic({"layers": {1: kda.state_dict()}, "opt": None, "state": state},
                     run / "stage2.pt")  # fmt: skip
    (run / "state.json").write_text(json.dumps({"done": [], "chosen": [1]}))
    cfg.student_prompts, cfg.student_max_new = 3, 5
    with delta_student(run, Path(cfg.teacher)) as (hybrid, _, manifest):
        assert hybrid.config.kda_layers == [1] and manifest["kda_layers"] == [2]
        replies = pipeline.student_replies(run, cfg, hybrid, tok)
        greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
        again = generate(hybrid, [tok.prompt(p) for p, _ in replies], 5, greedy, tok.eos)
    assert len(replies) == 3 and [r for _, r in replies] == [tok.decode(o) for o in again]
    assert json.loads((run / "data" / "student_replies.json").read_text()) == replies
