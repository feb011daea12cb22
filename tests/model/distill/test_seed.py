"""`distill seed`: a run rebuilt from a delta holds exactly the delta's weights, and growing it
trains only the new layers' stage 1 while the seeded layers enter stage 2 as shipped."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB, trained_run

from k3chat_model.delta import read_delta
from k3chat_model.distill import ckpt
from k3chat_model.distill.cli import main
from k3chat_model.distill.gate import export_delta
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.metrics import hybrid_kl
from k3chat_model.distill.pipeline import RunConfig, load_hybrid, run_pipeline
from k3chat_model.loading import load_model


def _delta(tmp: Path, teacher_dir: Path) -> tuple[Path, dict]:
    sds = trained_run(tmp / "trained", teacher_dir, [1, 2])
    path, _ = export_delta(tmp / "trained", tmp / "delta")
    return path, sds


def _seed(tmp: Path, teacher_dir: Path, capsys) -> tuple[Path, Path]:
    delta, _ = _delta(tmp, teacher_dir)
    seed = tmp / "seed"
    args = ["seed", str(seed), "--delta", str(delta), "--teacher", str(teacher_dir)]
    assert main([*args, "--data-dir", str(tmp)]) == 0
    assert json.loads(capsys.readouterr().out)["kda_layers"] == [1, 2]
    return seed, delta


def test_seeded_run_exports_the_delta_it_was_seeded_from(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    seed, delta = _seed(tmp_path, teacher_dir, capsys)
    st = json.loads((seed / "state.json").read_text())
    assert st["chosen"] == [1, 2] and "data" not in st["done"] and "stage2" in st["done"]
    assert st["seeded_from"]["tokens"]["stage2_tokens"] == 640
    again, _ = export_delta(seed, tmp_path / "again")
    (meta_a, a), (meta_b, b) = read_delta(delta), read_delta(again)
    assert meta_a["kda_layers"] == meta_b["kda_layers"] == [2, 3]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    students, _ = load_hybrid(seed, teacher_dir, [1, 2], "stage2.pt")
    assert sorted(students) == [1, 2]


def test_bad_seeds_are_one_line_errors(teacher_dir: Path, tmp_path: Path, capsys) -> None:
    seed, delta = _seed(tmp_path, teacher_dir, capsys)
    torn = tmp_path / "torn.safetensors"
    torn.write_bytes(delta.read_bytes()[:1000])
    cases = [
        (seed, delta, "already a run"),
        (tmp_path / "new", torn, "cannot read delta"),
        (tmp_path / "new", tmp_path / "missing.safetensors", "delta not found"),
    ]
    for run, path, why in cases:
        args = ["seed", str(run), "--delta", str(path), "--teacher", str(teacher_dir)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if "new" in p.name) == []


def test_growing_a_seed_trains_stage1_on_new_layers_only(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    seed, _ = _seed(tmp_path, teacher_dir, capsys)
    seeded = ckpt.load(seed / "stage2.pt")["layers"]
    run = tmp_path / "grow"
    (run / "data").mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(3, VOCAB, (8, 32), generator=g)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    torch.save(
        {"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
        run / "data" / "rows.pt",
    )
    cfg = RunConfig(
        teacher=str(teacher_dir), data_dir=str(tmp_path), candidates=[0, 1, 2, 3], n_layers=3,
        keep_layers=[1, 2], init_from=str(seed), gen_prompts=0, stage1_tokens=256,
        stage1b_tokens=128, stage2_tokens=192, stage2_lr=3e-3, stage2_pretrained_lr_scale=0.0,
    )  # fmt: skip
    ckpt.write_json(run / "config.json", asdict(cfg))
    ckpt.write_json(run / "state.json", {"done": ["data"], "teacher_replies": 0})

    st = run_pipeline(run)

    assert st["done"][-1] == "stage2" and st["pretrained"] == [1, 2]
    assert sorted(ckpt.load(run / "stage1.pt")["layers"]) == [0, 3]  # the seeded two skip it
    ranking = json.loads((run / "ranking.json").read_text())
    ranked = ranking["single_swap_kl"]
    assert sorted(map(int, ranked)) == [0, 3]
    # each candidate is ranked added to the seeded hybrid it would join
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)  # as the pipeline loads it
    kcfg = kda_config(teacher.config, [0, 1, 2, 3])
    seeded_mods, stage1 = {}, ckpt.load(run / "stage1.pt")["layers"]
    for i, weights in [(1, seeded[1]), (2, seeded[2]), (3, stage1[3])]:
        seeded_mods[i] = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        seeded_mods[i].load_state_dict(weights)
    assert ranking["context"]["layers"] == [1, 2]
    assert ranking["context"]["kl"] == pytest.approx(
        hybrid_kl(teacher, {i: seeded_mods[i] for i in (1, 2)}, rows[:2], mask[:2]), rel=1e-5
    )
    in_context = hybrid_kl(teacher, seeded_mods, rows[:2], mask[:2])
    alone = hybrid_kl(teacher, {3: seeded_mods[3]}, rows[:2], mask[:2])
    assert ranked["3"] == pytest.approx(in_context, rel=1e-5)
    assert ranked["3"] != pytest.approx(alone, rel=1e-3)  # alone, layer 3 costs something else
    new = next(i for i in st["chosen"] if i not in (1, 2))
    assert len(st["chosen"]) == 3
    before = ckpt.load(run / "stage1b.pt")["layers"]
    after = ckpt.load(run / "stage2.pt")["layers"]
    for i in (1, 2):  # stage 1b hands stage 2 the seeded weights; LR scale 0 keeps them
        for k, v in seeded[i].items():
            assert torch.equal(before[i][k], v) and torch.equal(after[i][k], v), (i, k)
    assert any(not torch.equal(before[new][k], v) for k, v in after[new].items())


def test_growing_a_run_stopped_after_stage1b_keeps_all_its_layers_trained(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    """seed → grow (`--until stage1b`) → grow again: the second growth takes every layer the
    first one finished as trained (no stage 1 for them; stage 1b hands them on unchanged)
    instead of failing on the seeded layers the first run's stage 1 never held."""
    seed, _ = _seed(tmp_path, teacher_dir, capsys)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(3, VOCAB, (8, 32), generator=g)
    mask = torch.ones_like(rows, dtype=torch.uint8)

    def grow(name: str, init_from: Path, keep: list[int], n_layers: int) -> tuple[Path, dict]:
        run = tmp_path / name
        (run / "data").mkdir(parents=True)
        torch.save(
            {"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
            run / "data" / "rows.pt",
        )
        cfg = RunConfig(
            teacher=str(teacher_dir), data_dir=str(tmp_path), candidates=[0, 1, 2, 3],
            n_layers=n_layers, keep_layers=keep, init_from=str(init_from), gen_prompts=0,
            stage1_tokens=256, stage1b_tokens=128,
        )  # fmt: skip
        ckpt.write_json(run / "config.json", asdict(cfg))
        ckpt.write_json(run / "state.json", {"done": ["data"], "teacher_replies": 0})
        return run, run_pipeline(run, until="stage1b")

    first, st1 = grow("grow1", seed, [1, 2], 3)
    assert st1["done"][-1] == "stage1b" and st1["pretrained"] == [1, 2]
    second, st2 = grow("grow2", first, st1["chosen"], 4)
    assert st2["done"][-1] == "stage1b" and st2["pretrained"] == st1["chosen"]
    assert sorted(ckpt.load(second / "stage1.pt")["layers"]) == sorted(
        {0, 1, 2, 3} - set(st1["chosen"])
    )
    handed_on = ckpt.load(first / "stage1b.pt")["layers"]
    got = ckpt.load(second / "stage1b.pt")["layers"]
    for i in st1["chosen"]:
        for k, v in handed_on[i].items():
            assert torch.equal(got[i][k], v), (i, k)


def test_a_growth_stopped_after_stage1_resumes_with_a_narrower_candidate_list(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    """`run --until stage1` leaves every candidate trained and none chosen, so the candidates
    can be priced in the hybrid first (`attribute --add-from`); resumed with only the chosen
    ones as candidates, the run ranks and grows by exactly those."""
    seed, _ = _seed(tmp_path, teacher_dir, capsys)
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(3, VOCAB, (8, 32), generator=g)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    run = tmp_path / "grow"
    (run / "data").mkdir(parents=True)
    torch.save(
        {"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
        run / "data" / "rows.pt",
    )
    cfg = RunConfig(
        teacher=str(teacher_dir), data_dir=str(tmp_path), candidates=[0, 3],
        n_layers=3, keep_layers=[1, 2], init_from=str(seed), gen_prompts=0,
        stage1_tokens=256, stage1b_tokens=128,
    )  # fmt: skip
    ckpt.write_json(run / "config.json", asdict(cfg))
    ckpt.write_json(run / "state.json", {"done": ["data"], "teacher_replies": 0})

    st = run_pipeline(run, until="stage1")
    assert st["done"] == ["data", "stage1"] and "chosen" not in st
    assert not (run / "ranking.json").exists()
    assert sorted(ckpt.load(run / "stage1.pt")["layers"]) == [0, 3]

    ckpt.write_json(run / "config.json", {**asdict(cfg), "candidates": [3]})
    st = run_pipeline(run, until="stage1b")
    assert st["done"][-1] == "stage1b" and st["chosen"] == [1, 2, 3]
