"""Tiny random checkpoints in the exact official layout, for tests and benchmarks.

`make_checkpoint(path, preset, seed)` writes config.json (K3 wrapper or plain Kimi Linear),
several safetensors shards with an index, official tensor names and dtypes (F32 gate/conv/norm
parameters, U8 MXFP4 routed experts, zero-padded A_log, a few vision tensors to be skipped) and a
small real tokenizer, so the whole loading path runs exactly as on a released checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from .testing_tokenizer import write_test_tokenizer

NUM_BASE_TOKENS = 768

PRESETS: dict[str, dict] = {
    "k3-tiny": {
        "wrapper": True,
        "text": {
            "model_type": "kimi_linear",
            "hidden_size": 64,
            "num_hidden_layers": 6,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "hidden_act": "situ",
            "activation_situ_beta": 4.0,
            "activation_situ_linear_beta": 25.0,
            "max_position_embeddings": 4096,
            "intermediate_size": 128,
            "first_k_dense_replace": 1,
            "moe_layer_freq": 1,
            "num_experts": 8,
            "num_experts_per_token": 2,
            "num_shared_experts": 2,
            "moe_intermediate_size": 64,
            "routed_expert_hidden_size": 32,
            "latent_moe_use_norm": True,
            "moe_router_activation_func": "sigmoid",
            "topk_method": "noaux_tc",
            "use_grouped_topk": True,
            "num_expert_group": 1,
            "topk_group": 1,
            "moe_renormalize": True,
            "routed_scaling_factor": 1.0,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "q_lora_rank": 32,
            "kv_lora_rank": 32,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
            "mla_use_nope": True,
            "mla_use_output_gate": True,
            "linear_attn_config": {
                "num_heads": 2,
                "head_dim": 32,
                "short_conv_kernel_size": 4,
                "use_full_rank_gate": True,
                "gate_lower_bound": -5.0,
                "kda_layers": [1, 2, 3, 5],
                "full_attn_layers": [4, 6],
            },
            "attn_res_block_size": 2,
            "num_nextn_predict_layers": 0,
            "dtype": "bfloat16",
        },
        "mxfp4": True,
        "a_log_pad": 32,
        "vision": True,
    },
    "kimi-linear-tiny": {
        "wrapper": False,
        "text": {
            "model_type": "kimi_linear",
            "hidden_size": 64,
            "num_hidden_layers": 4,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "hidden_act": "silu",
            "max_position_embeddings": 4096,
            "intermediate_size": 128,
            "first_k_dense_replace": 1,
            "moe_layer_freq": 1,
            "num_experts": 8,
            "num_experts_per_token": 2,
            "num_shared_experts": 1,
            "moe_intermediate_size": 32,
            "moe_router_activation_func": "sigmoid",
            "moe_renormalize": True,
            "routed_scaling_factor": 2.446,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "q_lora_rank": None,
            "kv_lora_rank": 32,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
            "mla_use_nope": True,
            "rope_theta": 10000.0,
            "linear_attn_config": {
                "num_heads": 2,
                "head_dim": 32,
                "short_conv_kernel_size": 4,
                "kda_layers": [1, 2, 3],
                "full_attn_layers": [4],
            },
        },
        "mxfp4": False,
        "a_log_pad": None,
        "vision": False,
    },
}

KIMI_LINEAR_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _linear(g: torch.Generator, out: int, inp: int) -> torch.Tensor:
    return torch.randn(out, inp, generator=g) / math.sqrt(inp)


def _official_tensors(preset: dict, vocab: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random tensors with official names, shapes and dtypes (spec §3)."""
    t = preset["text"]
    H, L = t["hidden_size"], t["num_hidden_layers"]
    P = "language_model.model" if preset["wrapper"] else "model"
    head = "language_model.lm_head.weight" if preset["wrapper"] else "lm_head.weight"
    bf = torch.bfloat16
    lin = t["linear_attn_config"]
    kda = {x - 1 for x in lin["kda_layers"]}
    out: dict[str, torch.Tensor] = {
        f"{P}.embed_tokens.weight": torch.randn(vocab, H, generator=g).to(bf),
        head: _linear(g, vocab, H).to(bf),
        f"{P}.norm.weight": (1 + 0.1 * torch.randn(H, generator=g)).to(bf),
    }
    attn_res = bool(t.get("attn_res_block_size"))
    if attn_res:
        out[f"{P}.output_attn_res_norm.weight"] = (1 + 0.1 * torch.randn(H, generator=g)).to(bf)
        out[f"{P}.output_attn_res_proj.weight"] = (
            0.5 * torch.randn(1, H, generator=g) / math.sqrt(H)
        ).to(bf)
    for i in range(L):
        p = f"{P}.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (1 + 0.1 * torch.randn(H, generator=g)).to(bf)
        out[f"{p}.post_attention_layernorm.weight"] = (1 + 0.1 * torch.randn(H, generator=g)).to(bf)
        if attn_res:
            for site in ("self_attention", "mlp"):
                out[f"{p}.{site}_res_norm.weight"] = (1 + 0.1 * torch.randn(H, generator=g)).to(bf)
                out[f"{p}.{site}_res_proj.weight"] = (
                    2.0 * torch.randn(1, H, generator=g) / math.sqrt(H)
                ).to(bf)
        a = f"{p}.self_attn"
        if i in kda:
            nh, d = lin["num_heads"], lin["head_dim"]
            C = nh * d
            for x in "qkv":
                out[f"{a}.{x}_proj.weight"] = _linear(g, C, H).to(bf)
                out[f"{a}.{x}_conv1d.weight"] = 0.5 * torch.randn(
                    C, 1, lin["short_conv_kernel_size"], generator=g
                )
            out[f"{a}.f_a_proj.weight"] = _linear(g, d, H).to(bf)
            out[f"{a}.f_b_proj.weight"] = _linear(g, C, d).to(bf)
            a_log = torch.empty(nh).uniform_(math.log(0.626), math.log(2.736), generator=g)
            if preset["a_log_pad"]:
                a_log = torch.cat([a_log, torch.zeros(preset["a_log_pad"] - nh)])
            else:
                a_log = a_log.view(1, 1, nh, 1)
            out[f"{a}.A_log"] = a_log.float()
            out[f"{a}.dt_bias"] = 0.5 * torch.randn(C, generator=g)
            out[f"{a}.b_proj.weight"] = _linear(g, nh, H).to(bf)
            if lin.get("use_full_rank_gate"):
                out[f"{a}.g_proj.weight"] = _linear(g, C, H).to(bf)
            else:
                out[f"{a}.g_a_proj.weight"] = _linear(g, d, H).to(bf)
                out[f"{a}.g_b_proj.weight"] = _linear(g, C, d).to(bf)
            out[f"{a}.o_norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
            out[f"{a}.o_proj.weight"] = _linear(g, H, C).to(bf)
        else:
            nh, nope, rope, v = (
                t["num_attention_heads"],
                t["qk_nope_head_dim"],
                t["qk_rope_head_dim"],
                t["v_head_dim"],
            )
            R = t["kv_lora_rank"]
            if t.get("q_lora_rank"):
                out[f"{a}.q_a_proj.weight"] = _linear(g, t["q_lora_rank"], H).to(bf)
                out[f"{a}.q_a_layernorm.weight"] = torch.ones(t["q_lora_rank"]).to(bf)
                out[f"{a}.q_b_proj.weight"] = _linear(g, nh * (nope + rope), t["q_lora_rank"]).to(
                    bf
                )
            else:
                out[f"{a}.q_proj.weight"] = _linear(g, nh * (nope + rope), H).to(bf)
            out[f"{a}.kv_a_proj_with_mqa.weight"] = _linear(g, R + rope, H).to(bf)
            out[f"{a}.kv_a_layernorm.weight"] = torch.ones(R).to(bf)
            out[f"{a}.kv_b_proj.weight"] = _linear(g, nh * (nope + v), R).to(bf)
            if t.get("mla_use_output_gate"):
                out[f"{a}.g_proj.weight"] = _linear(g, nh * v, H).to(bf)
            out[f"{a}.o_proj.weight"] = _linear(g, H, nh * v).to(bf)
        if i < t["first_k_dense_replace"]:
            m, I = f"{p}.mlp", t["intermediate_size"]
            out[f"{m}.gate_proj.weight"] = _linear(g, I, H).to(bf)
            out[f"{m}.up_proj.weight"] = _linear(g, I, H).to(bf)
            out[f"{m}.down_proj.weight"] = _linear(g, H, I).to(bf)
            continue
        m, E, I = f"{p}.block_sparse_moe", t["num_experts"], t["moe_intermediate_size"]
        W = t.get("routed_expert_hidden_size") or H
        out[f"{m}.gate.weight"] = _linear(g, E, H).to(bf)
        out[f"{m}.gate.e_score_correction_bias"] = 0.1 * torch.randn(E, generator=g)
        if t.get("routed_expert_hidden_size"):
            out[f"{m}.routed_expert_down_proj.weight"] = _linear(g, W, H).to(bf)
            out[f"{m}.routed_expert_norm.weight"] = torch.ones(W).to(bf)
            out[f"{m}.routed_expert_up_proj.weight"] = _linear(g, H, W).to(bf)
        S = I * t["num_shared_experts"]
        out[f"{m}.shared_experts.gate_proj.weight"] = _linear(g, S, H).to(bf)
        out[f"{m}.shared_experts.up_proj.weight"] = _linear(g, S, H).to(bf)
        out[f"{m}.shared_experts.down_proj.weight"] = _linear(g, H, S).to(bf)
        for e in range(E):
            for w, (o, n) in (("w1", (I, W)), ("w3", (I, W)), ("w2", (W, I))):
                weight = _linear(g, o, n)
                if preset["mxfp4"]:
                    from .ops.mxfp4 import quant_mxfp4

                    packed, scale = quant_mxfp4(weight)
                    out[f"{m}.experts.{e}.{w}.weight_packed"] = packed
                    out[f"{m}.experts.{e}.{w}.weight_scale"] = scale
                else:
                    out[f"{m}.experts.{e}.{w}.weight"] = weight.to(bf)
    if preset["vision"]:
        out["vision_tower.patch_embed.proj.weight"] = torch.randn(8, 3, 14, 14, generator=g).to(bf)
        out["vision_tower.encoder.final_layernorm.weight"] = torch.ones(8).to(bf)
        out["mm_projector.proj.0.weight"] = torch.randn(8, 8, generator=g).to(bf)
    return out


def write_sharded(path: Path, tensors: dict[str, torch.Tensor], num_shards: int) -> None:
    """Write tensors into `num_shards` files named like the official ones, plus the index."""
    from safetensors.torch import save_file

    names = list(tensors)
    per = math.ceil(len(names) / num_shards)
    weight_map, total = {}, 0
    for s in range(num_shards):
        chunk = names[s * per : (s + 1) * per]
        if not chunk:
            continue
        fname = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        save_file(
            {n: tensors[n].contiguous() for n in chunk},
            str(path / fname),
            metadata={"format": "pt"},
        )
        for n in chunk:
            weight_map[n] = fname
            total += tensors[n].numel() * tensors[n].element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def make_checkpoint(
    path: str | Path, preset: str = "k3-tiny", seed: int = 0, *, num_shards: int = 3
) -> Path:
    """Write a tiny random checkpoint in the official layout into `path` (created if needed)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = write_test_tokenizer(path, num_base=NUM_BASE_TOKENS)
    text = dict(spec["text"], vocab_size=vocab)
    bos, eos, pad = NUM_BASE_TOKENS, NUM_BASE_TOKENS + 2, NUM_BASE_TOKENS + 255
    if spec["wrapper"]:
        text.update(bos_token_id=bos, eos_token_id=eos)
        config = {
            "model_type": "kimi_k3",
            "architectures": ["KimiK3ForConditionalGeneration"],
            "bos_token_id": bos,
            "eos_token_id": eos,
            "pad_token_id": pad,
            "media_placeholder_token_id": NUM_BASE_TOKENS + 21,
            "tie_word_embeddings": False,
            "text_config": text,
            "vision_config": {"patch_size": 14, "vt_hidden_size": 8},
        }
        if spec["mxfp4"]:
            config["quantization_config"] = {
                "quant_method": "compressed-tensors",
                "format": "mxfp4-pack-quantized",
                "quantization_status": "compressed",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 4,
                            "type": "float",
                            "strategy": "group",
                            "group_size": 32,
                            "symmetric": True,
                        },
                    }
                },
                "ignore": [
                    "re:.*self_attn.*",
                    "re:.*shared_experts.*",
                    "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                    "re:.*lm_head.*",
                    "re:.*vision_tower.*",
                    "re:.*mm_projector.*",
                ],
            }
    else:
        config = dict(
            text, architectures=["KimiLinearForCausalLM"], bos_token_id=bos, eos_token_id=eos
        )
        tok_cfg_path = path / "tokenizer_config.json"
        tok_cfg = json.loads(tok_cfg_path.read_text())
        tok_cfg["chat_template"] = KIMI_LINEAR_TEMPLATE
        tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "temperature": 1.0, "top_p": 1.0})
    )
    g = torch.Generator().manual_seed(seed)
    write_sharded(path, _official_tensors(spec, vocab, g), num_shards)
    return path
