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


def test_batched_kl_metrics_equal_one_sequence_at_a_time_on_a_kda_hybrid(
    teacher_dir: Path,
) -> None:
    """Right padding never reaches a scored position, through softmax or KDA layers alike, and
    the per-sequence results go back to their own order (the interval resamples them)."""
    from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
    from k3chat_model.distill.metrics import swapped

    t = load_model(teacher_dir, dtype=torch.float32)
    s = load_model(teacher_dir, dtype=torch.float32)
    kcfg = kda_config(s.config, [0, 1, 2, 3])
    kda = {i: init_kda_from_gqa(s.model.layers[i].self_attn, kcfg, i) for i in (1, 2)}
    tok = ChatTokenizer(teacher_dir)
    texts = ["the cat sat on the mat", "a dog ran far away over the hills and back", "ok", "yes"]
    seqs = [tok.conversation([("user", f"say {x}"), ("assistant", x)]) for x in texts]
    assert len({len(ids) for ids, _ in seqs}) >= 3  # padding is really exercised
    with torch.no_grad(), swapped(s, kda, torch.float32):
        one = kl_metrics(t, s, seqs)
        ref = [t(torch.tensor([ids])).logits for ids, _ in seqs]
        for batch in (2, 3, 8):
            got = kl_metrics(t, s, seqs, batch=batch)
            assert got["tokens"] == one["tokens"] and got["top1"] == one["top1"]
            close = 1e-4 * one["kl"] + 1e-4  # float rounding, then the report's 4 decimals
            assert abs(got["kl"] - one["kl"]) <= close
            assert got["top1_ci95"] == one["top1_ci95"]
            known = kl_metrics(t, s, seqs, ref, batch=batch)  # with the teacher's logits given
            assert known["top1"] == one["top1"] and abs(known["kl"] - one["kl"]) <= close
    assert one["kl"] > 1e-4  # the hybrid differs from the teacher


def test_head_logits_from_kept_hidden_states_equal_the_teachers_forward(
    teacher_dir: Path,
) -> None:
    """`timed` evaluations score against `HeadLogits` (the teacher run once, its head
    re-applied each time): the logits, and so the reported KL and top-1, must be the forward's
    own, bit for bit, in the bf16 the evaluations use."""
    from k3chat_model.distill.metrics import HeadLogits

    t = load_model(teacher_dir, dtype=torch.bfloat16)
    s = load_model(teacher_dir, dtype=torch.bfloat16)
    with torch.no_grad():
        s.model.layers[1].mlp.down_proj.weight.mul_(0.5)  # a student that differs
    tok = ChatTokenizer(teacher_dir)
    texts = ["the cat sat on the mat", "a dog ran far away over the hills", "ok"]
    seqs = [tok.conversation([("user", f"say {x}"), ("assistant", x)]) for x in texts]
    kept = HeadLogits(t, [ids for ids, _ in seqs])
    assert len(kept) == 3
    with torch.no_grad():
        for j, (ids, _) in enumerate(seqs):
            assert torch.equal(kept[j], t(torch.tensor([ids])).logits)
    got, plain = kl_metrics(t, s, seqs, kept), kl_metrics(t, s, seqs)
    assert got == plain and plain["kl"] > 1e-4
