"""Routed experts as trainable capacity for a hybrid (`distill timed --train-experts L`).

Why: k3-smol's step-0 build carries K3's LatentMoE in every layer but 0, with the routed path
switched off (`routed_expert_up_proj` is zero, so the layer is exactly the teacher's MLP). That
path is a zero-initialised residual adapter the architecture already has: training it in stage
2 lets the MLP beside a KDA layer correct what the linear attention gets wrong, starting from
the teacher's function, at 1.5M parameters (3 MB bf16) a layer. Only the routed parts train;
the shared experts (the teacher's MLP) and the router's correction bias stay as they are.

A run stores trained experts beside its KDA layers, as `"experts": {layer: state}` in a stage-2
checkpoint, in names relative to `block_sparse_moe.`; a delta ships them under their official
names.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..errors import CheckpointError, ConfigError
from ..loading import keep_high_precision
from .hybrid import OFFICIAL_PREFIX

ROUTED_PREFIXES = (
    "gate.weight",
    "routed_expert_down_proj.",
    "routed_expert_up_proj.",
    "routed_expert_norm.",
    "experts.",
)
"""Parameter names (in `block_sparse_moe`) of the routed path."""


def moe_of(model: nn.Module, layer: int) -> nn.Module:
    """Layer `layer`'s `block_sparse_moe`, or a one-line error for a layer without routed
    experts (layer 0 of k3-smol has a dense MLP)."""
    layers = model.model.layers
    if not 0 <= layer < len(layers):
        raise ConfigError(f"--train-experts: no layer {layer} (0..{len(layers) - 1})")
    moe = getattr(layers[layer], "block_sparse_moe", None)
    if moe is None or not getattr(moe, "latent", 0):
        raise ConfigError(f"--train-experts: layer {layer} has no latent routed experts")
    return moe


def routed_params(moe: nn.Module) -> dict[str, nn.Parameter]:
    """The routed path's parameters by name (shared experts and the correction bias excluded)."""
    return {n: p for n, p in moe.named_parameters() if n.startswith(ROUTED_PREFIXES)}


def prepare(model: nn.Module, layers: list[int]) -> dict[int, nn.Module]:
    """`{layer: moe}` for `layers`, their routed parameters made fp32 in place so AdamW's
    small steps are not lost to bf16 rounding (the router computes in fp32 anyway)."""
    out = {}
    for i in sorted(set(layers)):
        moe = moe_of(model, i)
        for p in routed_params(moe).values():
            p.data = p.data.float()
        out[i] = moe
    return out


def routed_state(moe: nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of the routed parameters (what a checkpoint stores)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in routed_params(moe).items()}


def load_routed(moe: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a stored routed state into `moe` (keeping each parameter's dtype and device)."""
    params = routed_params(moe)
    if sorted(params) != sorted(state):
        raise CheckpointError(
            "stored experts do not match this model's routed experts "
            f"({sorted(set(params) ^ set(state))[:3]}…)"
        )
    with torch.no_grad():
        for n, p in params.items():
            if p.shape != state[n].shape:
                raise CheckpointError(f"stored expert {n} has shape {tuple(state[n].shape)}, "
                                  f"the model {tuple(p.shape)}")  # fmt: skip
            p.copy_(state[n])


def load_experts(model: nn.Module, saved: dict | None) -> list[int]:
    """Put a checkpoint's trained experts (if any) into `model`, in its dtype; returns their
    layers."""
    stored = (saved or {}).get("experts") or {}
    for i, state in stored.items():
        load_routed(moe_of(model, i), state)
    return sorted(stored)


def trainable(model: nn.Module, saved: dict | None, more: list[int] = ()) -> dict[int, nn.Module]:
    """`{layer: moe}` ready to train: the experts a checkpoint `saved` trained, loaded at full
    precision, and those of layers `more`, which start from the model's own."""
    stored = (saved or {}).get("experts") or {}
    mods = prepare(model, sorted(set(stored) | set(more)))
    for i, state in stored.items():
        load_routed(mods[i], state)
    return mods


@contextmanager
def cast(experts: dict[int, nn.Module], dtype: torch.dtype) -> Iterator[None]:
    """The routed parameters of `experts` in `dtype` (as they ship: the router stays fp32) for
    the duration, e.g. to evaluate a bf16 student outside autocast; their fp32 values are put
    back on exit."""
    keep = [
        (p, p.data)
        for moe in experts.values()
        for n, p in routed_params(moe).items()
        if not keep_high_precision(f"block_sparse_moe.{n}")  # the router stays fp32
    ]
    try:
        for p, data in keep:
            p.data = data.to(dtype)
        yield
    finally:
        for p, data in keep:
            p.data = data


def official_expert_tensors(states: dict[int, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Official checkpoint names -> fp32 tensors of trained experts (what a delta ships)."""
    return {
        f"{OFFICIAL_PREFIX}model.layers.{i}.block_sparse_moe.{n}": t.detach().float().contiguous()
        for i, sd in sorted(states.items())
        for n, t in sorted(sd.items())
    }


def experts_from_official(tensors: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """Inverse of `official_expert_tensors` over a delta's tensors (other names are skipped)."""
    out: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        rest = name.removeprefix(OFFICIAL_PREFIX).removeprefix("model.layers.")
        idx, sep, param = rest.partition(".block_sparse_moe.")
        if sep and param.startswith(ROUTED_PREFIXES):
            out.setdefault(int(idx), {})[param] = t.float()
    return out
