"""Tiny k3-smol-shaped teachers (all-GQA, tied embeddings) for the distillation tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizer_helpers import write_chatml_tokenizer

from k3chat_model.config import K3Config
from k3chat_model.distill.ckpt import StopFlag
from k3chat_model.model import K3ForCausalLM

VOCAB = 600


def tiny_config(n_layers: int = 4, attn_res: int | None = 2) -> dict:
    """A plain kimi_linear config.json: GQA 4/2 heads of 16, KDA 4x16, 4 layers."""
    return {
        "model_type": "kimi_linear",
        "hidden_size": 64,
        "num_hidden_layers": n_layers,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "full_attn_type": "gqa",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rope_theta": 10000.0,
        "intermediate_size": 96,
        "attn_res_block_size": attn_res,
        "linear_attn_config": {
            "num_heads": 4,
            "head_dim": 16,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
            "kda_layers": [],
            "full_attn_layers": list(range(1, n_layers + 1)),
        },
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def tiny_teacher(seed: int = 0) -> K3ForCausalLM:
    torch.manual_seed(seed)
    model = K3ForCausalLM(K3Config.from_hf(tiny_config()))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("res_proj.weight") or name.endswith("res.proj_weight"):
                p.zero_()
            elif p.dim() == 2:
                p.normal_(0, 0.3 if "embed" in name else 1 / p.shape[1] ** 0.5)
    return model.eval().requires_grad_(False)


def write_teacher_checkpoint(model: K3ForCausalLM, d: Path, config: dict | None = None) -> Path:
    """Official layout: `language_model.`-prefixed names, two shards, index, config (default
    `tiny_config()`), tokenizer."""
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    sd = {
        f"language_model.{k}": v.float().contiguous()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight"
    }
    names = sorted(sd)
    half = len(names) // 2
    weight_map = {}
    for j, part in enumerate((names[:half], names[half:])):
        fname = f"model-{j + 1:05d}-of-00002.safetensors"
        save_file({n: sd[n] for n in part}, str(d / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, fname))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (d / "config.json").write_text(json.dumps(config or tiny_config()))
    write_chatml_tokenizer(d)
    return d


class StopAfter(StopFlag):
    """Reports `stop` after `n` checks: a kill right after the n-th step or batch."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    @property
    def stop(self) -> bool:
        self.n -= 1
        return self.n < 0

    @stop.setter
    def stop(self, _v: bool) -> None:
        pass


REPLY_PROMPTS = [f"Tell me about topic {c}." for c in "abcdefgh"]
"""The reply-prompt pools of `reply_setup`: 4 chatterbot questions, then 4 instructions."""


def trained_run(
    run: Path, teacher_dir: Path, chosen: list[int], keep: list[int] | None = None
) -> dict[int, dict]:
    """A run through stage 2 whose KDA layers `chosen` hold "trained" weights (the teacher
    initialisation plus noise, so they differ from it); returns their state dicts."""
    from k3chat_model.distill import ckpt
    from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
    from k3chat_model.distill.pipeline import RunConfig
    from k3chat_model.loading import load_model

    (run / "data").mkdir(parents=True)
    (run / "data" / "rows.pt").write_bytes(b"rows")
    cfg = RunConfig(
        teacher=str(teacher_dir), data_dir="-", n_layers=len(chosen), keep_layers=keep or []
    )
    (run / "config.json").write_text(json.dumps(cfg.__dict__))
    st = {"done": ["data", "stage1", "rank", "stage1b", "stage2"], "chosen": chosen}
    (run / "state.json").write_text(json.dumps(st))
    teacher = load_model(teacher_dir)
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    torch.manual_seed(0)
    layers = {i: init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i) for i in chosen}
    with torch.no_grad():
        for mod in layers.values():
            for p in mod.parameters():
                p.add_(0.01 * torch.randn_like(p))
    sds = {i: m.state_dict() for i, m in layers.items()}
    ckpt.save_atomic({"layers": sds, "opt": None, "state": {"tokens": 640}}, run / "stage2.pt")
    return sds
