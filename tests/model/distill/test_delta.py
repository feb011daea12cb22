"""Delta write → apply round trip on an official-layout checkpoint, with hash checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from k3chat_model.delta import apply_delta, read_delta, write_delta
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, official_kda_tensors
from k3chat_model.errors import CheckpointError
from k3chat_model.loading import load_model

LAYERS = [1, 3]


def _delta(teacher_dir: Path, out: Path, dtype: str, layers=LAYERS) -> tuple[dict, dict]:
    t = load_model(teacher_dir, dtype=torch.float32)
    cfg = kda_config(t.config, list(range(4)))
    torch.manual_seed(3)
    studs = {i: init_kda_from_gqa(t.model.layers[i].self_attn, cfg, i) for i in layers}
    with torch.no_grad():
        for m in studs.values():
            m.g_proj.weight.normal_(0, 0.1)
    tensors = official_kda_tensors(studs)
    man = write_delta(
        tensors,
        out,
        kda_layers=layers,
        dtype=dtype,
        replace_prefixes=[f"language_model.model.layers.{i}.self_attn." for i in layers],
    )
    return man, tensors


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_round_trip(teacher_dir: Path, tmp_path: Path, dtype: str) -> None:
    man, tensors = _delta(teacher_dir, tmp_path / "d.safetensors", dtype)
    before = load_model(teacher_dir, dtype=torch.float32)
    assert apply_delta(teacher_dir, tmp_path / "d.safetensors", man["sha256"]) == man["sha256"]
    m = load_model(teacher_dir, dtype=torch.float32)
    assert m.config.layer_kinds == ["gqa", "kda", "gqa", "kda"]
    cfg = json.loads((teacher_dir / "config.json").read_text())
    assert cfg["linear_attn_config"]["kda_layers"] == [2, 4]
    assert cfg["linear_attn_config"]["full_attn_layers"] == [1, 3]
    for name, want in tensors.items():
        got = m.get_parameter(name.removeprefix("language_model."))
        tol = 0.0 if want.dim() < 2 or "conv1d" in name else (4e-3 if dtype == "bf16" else 1 / 127)
        assert (got - want).abs().max() <= tol * want.abs().max() + 1e-8, name
    # tensors outside the replaced layers are untouched
    assert torch.equal(
        m.model.layers[0].self_attn.q_proj.weight, before.model.layers[0].self_attn.q_proj.weight
    )
    assert torch.equal(m.model.embed_tokens.weight, before.model.embed_tokens.weight)
    # applying the same delta again is a no-op; a different one is refused
    apply_delta(teacher_dir, tmp_path / "d.safetensors")
    assert load_model(teacher_dir, dtype=torch.float32).config.layer_kinds == [
        "gqa",
        "kda",
        "gqa",
        "kda",
    ]


def test_int8_is_half_the_bytes_of_bf16(teacher_dir: Path, tmp_path: Path) -> None:
    a, _ = _delta(teacher_dir, tmp_path / "a.safetensors", "bf16")
    b, _ = _delta(teacher_dir, tmp_path / "b.safetensors", "int8")
    assert b["bytes"] < 0.65 * a["bytes"]


def test_hash_mismatch_is_a_checkpoint_error(teacher_dir: Path, tmp_path: Path) -> None:
    man, _ = _delta(teacher_dir, tmp_path / "d.safetensors", "bf16")
    with pytest.raises(CheckpointError, match="sha256"):
        apply_delta(teacher_dir, tmp_path / "d.safetensors", "0" * 64)
    data = bytearray((tmp_path / "d.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "d.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        read_delta(tmp_path / "d.safetensors", man["sha256"])
    assert not (teacher_dir / "k3chat-delta.json").exists()


def test_a_second_different_delta_is_refused(teacher_dir: Path, tmp_path: Path) -> None:
    m1, _ = _delta(teacher_dir, tmp_path / "a.safetensors", "bf16", layers=[1])
    m2, _ = _delta(teacher_dir, tmp_path / "b.safetensors", "bf16", layers=[2])
    apply_delta(teacher_dir, tmp_path / "a.safetensors", m1["sha256"])
    with pytest.raises(CheckpointError, match="already applied"):
        apply_delta(teacher_dir, tmp_path / "b.safetensors", m2["sha256"])
