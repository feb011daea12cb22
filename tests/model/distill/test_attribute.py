"""Leave-one-out attribution names the converted layer that costs the hybrid most; add-one-in
names the candidate that would cost it least."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB

from k3chat_model.distill import ckpt
from k3chat_model.distill.attribute import (
    _change_rows,
    add_one_in,
    format_report,
    leave_one_out,
    stage1_candidates,
)
from k3chat_model.distill.cli import main
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in
from k3chat_model.errors import CheckpointError, ConfigError


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


def test_adding_the_damaging_candidate_costs_most_and_the_hybrid_is_left_as_it_was(
    teacher,
) -> None:
    student = copy.deepcopy(teacher)
    kcfg = kda_config(teacher.config, list(range(4)))
    swap_in(student, {1: init_kda_from_gqa(teacher.model.layers[1].self_attn, kcfg, 1).eval()})
    mild = init_kda_from_gqa(teacher.model.layers[2].self_attn, kcfg, 2)
    bad = init_kda_from_gqa(teacher.model.layers[3].self_attn, kcfg, 3)
    with torch.no_grad():
        bad.o_proj.weight.mul_(30.0)
    seqs = _seqs()
    before = [student(torch.tensor([ids])).logits for ids, _ in seqs]
    attn3 = student.model.layers[3].self_attn

    res = add_one_in(teacher, student, {2: mild, 3: bad}, seqs)

    hyb, added = res["hybrid"], res["added"]
    assert hyb["kl"] > 0 and added[3]["kl"] > added[2]["kl"] and added[3]["kl"] > hyb["kl"]
    after = [student(torch.tensor([ids])).logits for ids, _ in seqs]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert student.model.layers[3].self_attn is attn3


def test_stage1_candidates_are_the_other_runs_layers_not_yet_in_the_hybrid(
    teacher, tmp_path: Path
) -> None:
    kcfg = kda_config(teacher.config, list(range(4)))
    layers = {}
    for i in (1, 2):
        mod = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        with torch.no_grad():
            mod.o_proj.weight.add_(float(i))  # trained weights differ from a fresh init
        layers[i] = mod.state_dict()
    ckpt.save_atomic({"layers": layers, "opt": None, "state": {"tokens": 4096}},
                     tmp_path / "stage1.pt")  # fmt: skip

    mods, tokens = stage1_candidates(tmp_path, teacher, exclude=[1, 3])

    assert set(mods) == {2} and tokens == 4096
    assert torch.equal(mods[2].o_proj.weight, layers[2]["o_proj.weight"])
    with pytest.raises(ConfigError, match="already in the hybrid"):
        stage1_candidates(tmp_path, teacher, exclude=[1, 2])
    with pytest.raises(ConfigError, match="no stage1.pt"):
        stage1_candidates(tmp_path / "nope", teacher, exclude=[])
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "stage1.pt").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        stage1_candidates(tmp_path / "torn", teacher, exclude=[])


def test_addition_table_lists_the_cheapest_candidate_first() -> None:
    rows = [
        {"layer": 4, "kl": 0.11, "top1": 0.85, "kl_cost": 0.004, "top1_cost": 0.003},
        {"layer": 22, "kl": 0.12, "top1": 0.84, "kl_cost": 0.012, "top1_cost": 0.013},
    ]
    rep = {"chat": {"hybrid": {"kl": 0.106, "top1": 0.853, "tokens": 50}, "added": rows}}
    lines = format_report(rep).splitlines()
    assert "chat: hybrid KL 0.1060" in lines[0] and "cost" in lines[1]
    assert lines[2].split()[0] == "4" and lines[3].split()[0] == "22"


def test_add_from_a_run_without_stage1_is_a_one_line_error_before_any_export(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"teacher": str(teacher_dir), "data_dir": "-"}))
    (run / "state.json").write_text(json.dumps({"done": ["stage2"], "chosen": [1]}))
    args = ["attribute", str(run), "--add-from", str(tmp_path / "other"), "--threads", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no stage1.pt" in err and err.count("\n") == 1
    assert not (run / "delta").exists()


def test_change_rows_are_gains_for_restored_layers_and_costs_for_added_ones() -> None:
    base = {"kl": 0.10, "top1": 0.85}
    per = {3: {"kl": 0.12, "top1": 0.84}, 7: {"kl": 0.08, "top1": 0.86}}
    gain = _change_rows(base, per, "gain")
    assert [r["layer"] for r in gain] == [7, 3]
    assert gain[0]["kl_gain"] == 0.02 and gain[0]["top1_gain"] == 0.01
    cost = _change_rows(base, per, "cost")
    assert [r["layer"] for r in cost] == [7, 3]
    assert cost[1]["kl_cost"] == 0.02 and cost[1]["top1_cost"] == 0.01


def test_a_probe_decodes_through_a_swapped_in_layer_and_the_config_is_restored(teacher) -> None:
    from k3chat_model.distill.generate import generate
    from k3chat_model.events import SamplingParams

    student = copy.deepcopy(teacher)
    kcfg = kda_config(teacher.config, list(range(4)))
    cand = init_kda_from_gqa(teacher.model.layers[2].self_attn, kcfg, 2)
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    seen = []

    def probe(m) -> dict:  # noqa: ANN001
        seen.append(list(m.config.kda_layers))
        return {"decoded": len(generate(m, [[5, 6, 7, 8]], 3, greedy, -1)[0])}

    res = add_one_in(teacher, student, {2: cand}, _seqs(), probe)

    assert seen == [[], [2]]  # the cache was laid out for the layer as swapped in
    assert res["hybrid"]["decoded"] == res["added"][2]["decoded"] == 3
    assert student.config.kda_layers == []
