import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from k3chat_model.errors import CheckpointError, ConfigError, UnsupportedArchitecture
from k3chat_model.layers.mxfp4 import MXFP4Linear
from k3chat_model.loading import load_model, remap_official_name
from k3chat_model.testing import write_sharded


def _shard_of(path, tensor):
    return json.loads((path / "model.safetensors.index.json").read_text())["weight_map"][tensor]


def test_one_shard_and_many_shards_give_identical_logits(tiny_k3_checkpoint, tmp_path):
    one = tmp_path / "one"
    shutil.copytree(tiny_k3_checkpoint, one)
    tensors = {}
    for f in sorted(one.glob("*.safetensors")):
        tensors.update(load_file(f))
        f.unlink()
    (one / "model.safetensors.index.json").unlink()
    save_file(tensors, str(one / "model.safetensors"))
    many = tmp_path / "many"
    shutil.copytree(tiny_k3_checkpoint, many)
    for f in many.glob("*.safetensors"):
        f.unlink()
    write_sharded(many, tensors, 7)
    ids = torch.arange(50)[None]
    a = load_model(one, dtype=torch.float32)(ids).logits
    b = load_model(many, dtype=torch.float32)(ids).logits
    assert torch.equal(a, b)


def test_official_names_map_to_engine_names():
    assert (
        remap_official_name("language_model.model.layers.3.self_attention_res_proj.weight")
        == "model.layers.3.self_attention_res.proj_weight"
    )
    assert (
        remap_official_name("language_model.layers.0.mlp.gate_proj.weight")
        == "model.layers.0.mlp.gate_proj.weight"
    )
    assert remap_official_name("language_model.lm_head.weight") == "lm_head.weight"
    assert remap_official_name("vision_tower.encoder.blocks.0.wo.weight") is None


def test_mxfp4_experts_stay_packed_and_fp32_params_stay_fp32(tiny_k3_checkpoint):
    model = load_model(tiny_k3_checkpoint, dtype=torch.bfloat16)
    moe = model.model.layers[1].block_sparse_moe
    assert isinstance(moe.experts[0].w1, MXFP4Linear)
    assert moe.experts[0].w1.weight_packed.dtype == torch.uint8
    kda = model.model.layers[0].self_attn
    assert kda.A_log.dtype == torch.float32 and kda.A_log.shape == (2,)
    assert kda.dt_bias.dtype == torch.float32 and kda.q_conv1d.weight.dtype == torch.float32
    assert moe.gate.e_score_correction_bias.dtype == torch.float32
    assert kda.q_proj.weight.dtype == torch.bfloat16


def _rewrite_tensor(ckpt, name, fn):
    shard = ckpt / _shard_of(ckpt, name)
    tensors = load_file(shard)
    fn(tensors)
    save_file(tensors, str(shard))
    return shard


def test_missing_tensor_is_named(tiny_k3_checkpoint):
    name = "language_model.model.layers.2.self_attn.b_proj.weight"
    shard = _rewrite_tensor(tiny_k3_checkpoint, name, lambda t: t.pop(name))
    with pytest.raises(
        CheckpointError, match=rf"missing .*{re.escape(name)} \(indexed in {shard.name}"
    ):
        load_model(tiny_k3_checkpoint)


def test_wrong_shape_names_file_and_tensor(tiny_k3_checkpoint):
    name = "language_model.model.layers.0.self_attn.q_proj.weight"
    shard = _rewrite_tensor(tiny_k3_checkpoint, name, lambda t: t.update({name: torch.zeros(3, 3)}))
    with pytest.raises(CheckpointError, match=rf"{shard.name}.*q_proj.weight.*\[3, 3\]"):
        load_model(tiny_k3_checkpoint)


def test_truncated_shard_is_reported(tiny_k3_checkpoint):
    shard = tiny_k3_checkpoint / _shard_of(tiny_k3_checkpoint, "language_model.lm_head.weight")
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=shard.name):
        load_model(tiny_k3_checkpoint)


def test_unknown_model_type_is_refused(tiny_k3_checkpoint):
    cfg = json.loads((tiny_k3_checkpoint / "config.json").read_text())
    cfg["model_type"] = "llama"
    (tiny_k3_checkpoint / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedArchitecture, match="llama"):
        load_model(tiny_k3_checkpoint)


def test_a_log_of_wrong_length_is_refused(tiny_k3_checkpoint):
    name = "language_model.model.layers.0.self_attn.A_log"
    _rewrite_tensor(tiny_k3_checkpoint, name, lambda t: t.update({name: torch.ones(5)}))
    with pytest.raises(CheckpointError, match="A_log"):
        load_model(tiny_k3_checkpoint)


def test_inconsistent_layer_lists_are_refused(tiny_k3_checkpoint):
    cfg = json.loads((tiny_k3_checkpoint / "config.json").read_text())
    cfg["text_config"]["linear_attn_config"]["full_attn_layers"] = [4]
    (tiny_k3_checkpoint / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="neither"):
        load_model(tiny_k3_checkpoint)
