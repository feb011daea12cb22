"""Build KDA students from a GQA teacher and swap them into a model (research/default-model.md §5).

Initialisation, chosen so a fresh KDA layer starts close to the attention it replaces:
- q/k/v/o copied from the teacher, k and v repeated over the query heads that share them
  (SDPA's `enable_gqa` pairs query head h with kv head h // group); no RoPE;
- short convs are an identity tap (weight[..., -1] = 1);
- β = σ(0) = 0.5 (b_proj zero); output gate σ(0) = 0.5 (g_proj zero);
- decay g = lb·σ(dt_bias) (A_log 0, f_b zero) with 1 − α log-uniform in [0.005, 0.1];
- o_norm weight 1 and each o_proj input column scaled by 2 × the teacher's per-head, per-channel
  attention-output RMS, so the normalised, half-gated output has the teacher's scale.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ..config import K3Config
from ..layers.gqa import GQAAttention
from ..model import K3ForCausalLM
from .kda_train import TrainableKDA

OFFICIAL_PREFIX = "language_model."


def kda_config(config: K3Config, kda_layers: list[int]) -> K3Config:
    """A copy of `config` whose layers `kda_layers` (0-based) are KDA."""
    c = copy.deepcopy(config)
    c.kda_layers = sorted(set(kda_layers))
    return c


def init_kda_from_gqa(
    teacher: GQAAttention,
    config: K3Config,
    layer_idx: int,
    out_rms: torch.Tensor | None = None,
    seed: int = 0,
) -> TrainableKDA:
    """A fp32 KDA layer initialised from a teacher GQA layer (see module docstring).

    `out_rms` [H, D]: the teacher's attention-output RMS per head and channel (before o_proj);
    None leaves o_proj as copied.
    """
    H, D = config.kda_num_heads, config.kda_head_dim
    if (H, D) != (teacher.n_heads, teacher.head_dim):
        raise ValueError(
            f"KDA heads {H}x{D} must match the teacher's {teacher.n_heads}x{teacher.head_dim}"
        )
    mod = TrainableKDA(config, layer_idx).float()
    group = teacher.n_heads // teacher.n_kv
    gen = torch.Generator().manual_seed(seed + 1000 * layer_idx)
    hidden = config.hidden_size

    def rep(w: torch.Tensor) -> torch.Tensor:
        return (
            w.float()
            .view(teacher.n_kv, D, hidden)
            .repeat_interleave(group, dim=0)
            .reshape(H * D, hidden)
        )

    with torch.no_grad():
        mod.q_proj.weight.copy_(teacher.q_proj.weight.float())
        mod.k_proj.weight.copy_(rep(teacher.k_proj.weight))
        mod.v_proj.weight.copy_(rep(teacher.v_proj.weight))
        o = teacher.o_proj.weight.float().clone()
        if out_rms is not None:
            o = o * (2.0 * out_rms.float().reshape(1, H * D).clamp_min(1e-4))
        mod.o_proj.weight.copy_(o)
        for conv in (mod.q_conv1d, mod.k_conv1d, mod.v_conv1d):
            conv.weight.zero_()
            conv.weight[..., -1] = 1.0
        mod.f_a_proj.weight.copy_(
            torch.randn(mod.f_a_proj.weight.shape, generator=gen) / math.sqrt(hidden)
        )
        mod.f_b_proj.weight.zero_()
        mod.A_log.zero_()
        lb = config.kda_gate_lower_bound or -5.0
        one_minus_alpha = torch.exp(
            torch.empty(H * D).uniform_(math.log(0.005), math.log(0.1), generator=gen)
        )
        s = (-torch.log1p(-one_minus_alpha) / -lb).clamp(1e-6, 1 - 1e-6)  # σ(z) = −ln α / |lb|
        mod.dt_bias.copy_(torch.log(s) - torch.log1p(-s))
        mod.b_proj.weight.zero_()
        if hasattr(mod, "g_proj"):
            mod.g_proj.weight.zero_()
        else:
            mod.g_a_proj.weight.zero_()
            mod.g_b_proj.weight.zero_()
        mod.o_norm.weight.fill_(1.0)
    return mod


@torch.no_grad()
def attention_output_rms(
    model: K3ForCausalLM, layers: list[int], batch: torch.Tensor
) -> dict[int, torch.Tensor]:
    """Per layer: RMS [H, D] of the teacher attention output before o_proj on `batch` [B, T]."""
    acc: dict[int, torch.Tensor] = {}
    hooks = []
    for i in layers:
        attn = model.model.layers[i].self_attn
        H, D = attn.n_heads, attn.head_dim

        def hook(_m, args, _out, i=i, H=H, D=D):  # noqa: ANN001
            x = args[0].float().reshape(-1, H, D)
            acc[i] = x.pow(2).mean(0).sqrt()

        hooks.append(attn.o_proj.register_forward_hook(hook))
    try:
        model(batch)
    finally:
        for h in hooks:
            h.remove()
    return acc


def swap_in(model: K3ForCausalLM, layers: dict[int, nn.Module]) -> K3ForCausalLM:
    """Replace the token mixers of `layers` (0-based) in place and mark them KDA in the config."""
    cfg = kda_config(model.config, sorted(set(model.config.kda_layers) | set(layers)))
    for i, mod in layers.items():
        model.model.layers[i].self_attn = mod
    model.config = cfg
    model.model.config = cfg
    return model


def official_kda_tensors(layers: dict[int, nn.Module]) -> dict[str, torch.Tensor]:
    """Official checkpoint names -> fp32 tensors for the KDA layers (what a delta ships)."""
    out = {}
    for i, mod in sorted(layers.items()):
        for name, t in mod.state_dict().items():
            out[f"{OFFICIAL_PREFIX}model.layers.{i}.self_attn.{name}"] = (
                t.detach().float().contiguous()
            )
    return out


def layers_from_official(
    tensors: dict[str, torch.Tensor], config: K3Config
) -> dict[int, TrainableKDA]:
    """Inverse of `official_kda_tensors`: fp32 TrainableKDA modules keyed by layer index."""
    per: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        rest = name.removeprefix(OFFICIAL_PREFIX).removeprefix("model.layers.")
        idx, sep, param = rest.partition(".self_attn.")
        if not sep:  # e.g. trained routed experts (`experts.experts_from_official`)
            continue
        per.setdefault(int(idx), {})[param] = t
    mods = {}
    for i, sd in per.items():
        mod = TrainableKDA(config, i).float()
        if "A_log" in sd:
            sd["A_log"] = sd["A_log"].reshape(-1)[: mod.H]
        mod.load_state_dict(sd)
        mods[i] = mod
    return mods
