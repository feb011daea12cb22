"""Leave-one-out attribution names the converted layer that costs the hybrid most."""

from __future__ import annotations

import copy

import torch
from distill_helpers import VOCAB

from k3chat_model.distill.attribute import format_report, leave_one_out
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in


def _seqs() -> list:
    g = torch.Generator().manual_seed(5)
    out = []
    for n in (40, 56):
        ids = torch.randint(3, VOCAB, (n,), generator=g).tolist()
        out.append((ids, [0] * 8 + [1] * (n - 8)))
    return out


def test_restoring_the_damaged_layer_gains_most_and_the_hybrid_is_left_as_it_was(teacher) -> None:
    student = copy.deepcopy(teacher)
    kcfg = kda_config(teacher.config, list(range(4)))
    mild = init_kda_from_gqa(teacher.model.layers[1].self_attn, kcfg, 1)
    bad = init_kda_from_gqa(teacher.model.layers[3].self_attn, kcfg, 3)
    with torch.no_grad():
        mild.o_proj.weight.mul_(0.3)
        bad.o_proj.weight.mul_(30.0)  # a layer whose output swamps the residual stream
    swap_in(student, {1: mild.eval(), 3: bad.eval()})
    seqs = _seqs()
    before = [student(torch.tensor([ids])).logits for ids, _ in seqs]

    res = leave_one_out(teacher, student, [1, 3], seqs)

    hyb, r = res["hybrid"], res["restored"]
    assert hyb["tokens"] == 32 + 48 and hyb["kl"] > 0.01
    # Each restored layer removes part of the damage; the swamping one removes the most.
    assert r[3]["kl"] < r[1]["kl"] < hyb["kl"]
    assert r[3]["top1"] >= hyb["top1"]
    after = [student(torch.tensor([ids])).logits for ids, _ in seqs]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert student.model.layers[3].self_attn is bad


def test_single_kda_layer_restored_is_exactly_the_teacher(teacher) -> None:
    student = copy.deepcopy(teacher)
    kcfg = kda_config(teacher.config, [2])
    swap_in(student, {2: init_kda_from_gqa(teacher.model.layers[2].self_attn, kcfg, 2).eval()})
    res = leave_one_out(teacher, student, [2], _seqs())
    assert res["restored"][2]["kl"] < 1e-6 and res["restored"][2]["top1"] == 1.0


def test_report_table_lists_every_layer_largest_gain_first() -> None:
    rows = [
        {"layer": 12, "kl": 0.1, "top1": 0.82, "kl_gain": 0.03, "top1_gain": 0.01},
        {"layer": 5, "kl": 0.12, "top1": 0.81, "kl_gain": 0.01, "top1_gain": 0.0},
    ]
    rep = {"assistant": {"hybrid": {"kl": 0.13, "top1": 0.81, "tokens": 99}, "restored": rows}}
    text = format_report(rep)
    lines = text.splitlines()
    assert "assistant: hybrid KL 0.1300" in lines[0] and "99 tokens" in lines[0]
    assert lines[2].split()[0] == "12" and lines[3].split()[0] == "5"
