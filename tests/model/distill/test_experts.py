"""Routed experts as trainable capacity (`timed --train-experts`): they start as the step-0
build's switched-off path, train with the KDA layers, and travel through every place a run's
weights go: the timed snapshot, rewind, the exported delta, the shipped model, seed, restore."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB, tiny_config, write_teacher_checkpoint
from test_timed import _held_out, _rows, _run

from k3chat_model.config import K3Config
from k3chat_model.delta import apply_delta, read_delta
from k3chat_model.distill import ckpt, timed
from k3chat_model.distill.cli import main
from k3chat_model.distill.experts import moe_of, prepare, routed_params
from k3chat_model.distill.gate import export_delta
from k3chat_model.distill.restore import restore_layers
from k3chat_model.distill.seed import seed_run
from k3chat_model.errors import ConfigError
from k3chat_model.loading import keep_high_precision, load_model
from k3chat_model.model import K3ForCausalLM


def moe_config() -> dict:
    """`tiny_config` with k3-smol's MoE layout: layer 0 dense, then latent routed experts."""
    return tiny_config() | {
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 2,
        "moe_intermediate_size": 48,
        "routed_expert_hidden_size": 16,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "num_expert_group": 1,
        "topk_group": 1,
    }


@pytest.fixture
def moe_teacher_dir(tmp_path: Path) -> Path:
    """A teacher whose routed path adds exactly 0 (up-projection zero), as k3-smol's step 0."""
    torch.manual_seed(0)
    model = K3ForCausalLM(K3Config.from_hf(moe_config()))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("res_proj.weight") or "routed_expert_up_proj" in name:
                p.zero_()
            elif p.dim() == 2:
                p.normal_(0, 0.3 if "embed" in name else 1 / p.shape[1] ** 0.5)
    return write_teacher_checkpoint(model.eval(), tmp_path / "teacher", moe_config())


def _moe_run(tmp: Path, teacher_dir: Path, layers: tuple[int, ...] = (1, 2)) -> Path:
    return _run(tmp, teacher_dir, layers)


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.float()


def test_trained_experts_ship_in_the_delta_and_change_what_the_model_computes(
    moe_teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _moe_run(tmp_path, moe_teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    _held_out(monkeypatch, held[:2], held[2:])
    rep = timed.timed_stage2(
        run, device="cpu", seconds=8, batch=2, lr=3e-3, evals=1, keep="last",
        train_experts=[2, 3], expert_lr_scale=2.0, log=lambda _m: None,
    )  # fmt: skip
    assert rep["experts"] == [2, 3] and rep["best_step"] > 0
    saved = ckpt.load(run / "stage2-timed.pt")
    assert sorted(saved["experts"]) == [2, 3]
    for sd in saved["experts"].values():  # the switched-off path now carries load
        assert sd["routed_expert_up_proj.weight"].abs().max() > 0
        assert not any(n.startswith("shared_experts") for n in sd)
        assert "gate.e_score_correction_bias" not in sd

    assert main(["rewind", str(run), str(run / "stage2-timed.pt")]) == 0
    delta, manifest = export_delta(run)
    meta, tensors = read_delta(delta, manifest["sha256"])
    assert meta["extra"]["experts"] == [2, 3]
    up = "language_model.model.layers.3.block_sparse_moe.routed_expert_up_proj.weight"
    assert torch.equal(
        tensors[up], saved["experts"][3]["routed_expert_up_proj.weight"].bfloat16().float()
    )
    assert not any("shared_experts" in n or ".layers.1.block_sparse_moe" in n for n in tensors)

    work = tmp_path / "shipped"
    import shutil

    shutil.copytree(moe_teacher_dir, work)
    apply_delta(work, delta, manifest["sha256"])
    shipped = load_model(work, dtype=torch.float32)
    for i in (2, 3):  # every routed tensor the run trained is what the shipped model holds
        for n, p in routed_params(moe_of(shipped, i)).items():
            stored = saved["experts"][i][n]
            want = stored if keep_high_precision(f"block_sparse_moe.{n}") or stored.dim() < 2 else (
                stored.bfloat16().float())  # fmt: skip
            assert torch.equal(p, want), (i, n)
    ids = _rows(2, 5)[0].long()
    on = _logits(shipped, ids)
    with torch.no_grad():  # the same shipped model with the experts switched off again
        for i in (2, 3):
            moe_of(shipped, i).routed_expert_up_proj.weight.zero_()
    assert (_logits(shipped, ids) - on).norm() / on.norm() > 1e-4


def test_seed_and_restore_keep_the_experts(
    moe_teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _moe_run(tmp_path, moe_teacher_dir)
    saved = ckpt.load(run / "stage2.pt")
    teacher = load_model(moe_teacher_dir)
    experts = prepare(teacher, [3])
    with torch.no_grad():
        for p in routed_params(experts[3]).values():
            p.add_(0.05)
    saved["experts"] = {3: {n: p.detach().clone() for n, p in routed_params(experts[3]).items()}}
    ckpt.save_atomic(saved, run / "stage2.pt")
    delta, manifest = export_delta(run)

    seeded = seed_run(tmp_path / "seed", delta, moe_teacher_dir, "-", manifest["sha256"])
    assert seeded["chosen"] == [1, 2]
    again = ckpt.load(tmp_path / "seed" / "stage2.pt")["experts"]
    for n, t in saved["experts"][3].items():
        assert torch.equal(
            again[3][n], t.bfloat16().float() if t.dim() == 2 and n != "gate.weight" else t
        )
    # the seeded run exports the same delta it came from
    assert read_delta(export_delta(tmp_path / "seed")[0])[1].keys() == read_delta(delta)[1].keys()

    restore_layers(run, tmp_path / "restored", [2])
    kept = ckpt.load(tmp_path / "restored" / "stage2.pt")
    assert sorted(kept["layers"]) == [1] and sorted(kept["experts"]) == [3]


def test_a_layer_without_routed_experts_is_a_one_line_error(moe_teacher_dir: Path) -> None:
    model = load_model(moe_teacher_dir)
    with pytest.raises(ConfigError, match="layer 0 has no latent routed experts"):
        prepare(model, [0])
    with pytest.raises(ConfigError, match="no layer 9"):
        prepare(model, [9])
    assert VOCAB > 0


def test_a_grown_run_carries_the_experts_of_the_hybrid_it_grows_from(
    moe_teacher_dir: Path, tmp_path: Path
) -> None:
    """seed (with experts) → grow with the seeded layers frozen: stage 2 keeps the experts,
    unchanged, and the grown run's delta ships them."""
    from dataclasses import asdict

    from k3chat_model.distill.pipeline import RunConfig, run_pipeline

    run = _moe_run(tmp_path, moe_teacher_dir, layers=(2,))
    saved = ckpt.load(run / "stage2.pt")
    model = load_model(moe_teacher_dir)
    with torch.no_grad():
        for p in routed_params(moe_of(model, 3)).values():
            p.add_(0.05)
    saved["experts"] = {
        3: {n: p.detach().clone() for n, p in routed_params(moe_of(model, 3)).items()}
    }
    ckpt.save_atomic(saved, run / "stage2.pt")
    delta, manifest = export_delta(run)
    seed_run(tmp_path / "seed", delta, moe_teacher_dir, "-", manifest["sha256"])
    seeded = ckpt.load(tmp_path / "seed" / "stage2.pt")["experts"]

    grown = tmp_path / "grown"
    (grown / "data").mkdir(parents=True)
    rows, mask = _rows(8, 3)
    torch.save({"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
               grown / "data" / "rows.pt")  # fmt: skip
    cfg = RunConfig(
        teacher=str(moe_teacher_dir), data_dir=str(tmp_path), candidates=[1], n_layers=2,
        keep_layers=[2], init_from=str(tmp_path / "seed"), gen_prompts=0, stage1_tokens=128,
        stage1b_tokens=64, stage2_tokens=128, stage2_pretrained_lr_scale=0.0,
    )  # fmt: skip
    ckpt.write_json(grown / "config.json", asdict(cfg))
    ckpt.write_json(grown / "state.json", {"done": ["data"], "teacher_replies": 0})
    st = run_pipeline(grown)
    assert "stage2" in st["done"] and st["chosen"] == [1, 2]
    got = ckpt.load(grown / "stage2.pt")["experts"]
    assert sorted(got) == [3]
    for n, t in seeded[3].items():
        assert torch.equal(got[3][n], t), n
    names = read_delta(export_delta(grown)[0])[1]
    assert any(".layers.3.block_sparse_moe.experts.0." in n for n in names)
