"""The gate's checks on a tiny model: thresholds decide, and a damaged student fails."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from k3chat_model.distill import gate
from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.distill.gate import evaluate, is_correct, kl_metrics, max_phrase_repeats
from k3chat_model.loading import load_model


def test_phrase_repeats_counts_word_4grams() -> None:
    assert max_phrase_repeats("a lone soul, a lone soul, a lone soul, a lone soul") == 3
    assert max_phrase_repeats("A lone soul a lone soul a lone soul a lone soul a lone soul") == 4
    assert max_phrase_repeats("the cat sat on the mat") == 1
    assert max_phrase_repeats("") == 0


def test_answers_match_whole_words_only() -> None:
    assert is_correct("The capital of France is Paris.", ("paris",))
    assert not is_correct("It is -18.0000 Celsius", ("0",))
    assert is_correct("about 100.0 degrees", ("100",))
    assert not is_correct("Parisian food", ("paris",))


def _seqs(tok: ChatTokenizer) -> list:
    return [tok.conversation([("user", "hello there"), ("assistant", "the cat sat on the mat")])]


def test_identical_student_passes_kl_and_damaged_one_fails(teacher_dir: Path, monkeypatch) -> None:
    t = load_model(teacher_dir, dtype=torch.float32)
    s = load_model(teacher_dir, dtype=torch.float32)
    tok = ChatTokenizer(teacher_dir)
    seqs = _seqs(tok)
    same = kl_metrics(t, s, seqs)
    assert same["kl"] < 1e-6 and same["top1"] == 1.0 and same["tokens"] > 5
    monkeypatch.setattr(gate, "FACTUAL", [("hello there", ("zzz-never",))])
    monkeypatch.setattr(gate, "LOOP_PROMPTS", ["hello there"])
    monkeypatch.setattr(gate, "LOOP_TOKENS", 8)
    rep = evaluate(t, s, tok, seqs, seqs)
    assert rep["chat"]["kl"] < 1e-6 and rep["factual_correct"] == 0 and not rep["passed"]
    with torch.no_grad():
        for layer in s.model.layers:
            layer.self_attn.o_proj.weight.mul_(-3.0)
    rep = evaluate(t, s, tok, seqs, seqs, fast=True)
    assert rep["chat"]["kl"] > gate.MAX_KL and not rep["passed"]


def test_kl_metrics_reports_a_top1_interval_around_its_estimate(teacher_dir: Path) -> None:
    t = load_model(teacher_dir, dtype=torch.float32)
    s = load_model(teacher_dir, dtype=torch.float32)
    with torch.no_grad():
        s.model.layers[0].self_attn.o_proj.weight.mul_(-1.0)
    tok = ChatTokenizer(teacher_dir)
    seqs = _seqs(tok) + [tok.conversation([("user", "hi"), ("assistant", "a dog ran far away")])]
    res = kl_metrics(t, s, seqs)
    lo, hi = res["top1_ci95"]
    assert lo <= res["top1"] <= hi


def test_run_teacher_loads_the_runs_own_teacher_in_bf16(teacher_dir: Path, tmp_path: Path) -> None:
    from k3chat_model.distill.pipeline import RunConfig, run_teacher

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps(asdict(RunConfig(teacher=str(teacher_dir), data_dir=str(tmp_path))))
    )
    got_dir, tok, teacher = run_teacher(run)
    assert got_dir == teacher_dir
    assert teacher.model.embed_tokens.weight.dtype == torch.bfloat16
    x = torch.tensor([_seqs(tok)[0][0]])
    with torch.no_grad():
        want = load_model(teacher_dir, dtype=torch.bfloat16)(x).logits
        assert torch.equal(teacher(x).logits, want)
