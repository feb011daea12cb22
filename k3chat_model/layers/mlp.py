"""Gated MLPs with SiTU (K3) or SiLU (Kimi Linear, converted models) — spec §2.6."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import K3Config
from .linear import Linear


def situ_and_mul(
    gate: torch.Tensor, up: torch.Tensor, beta: float = 4.0, linear_beta: float = 25.0
) -> torch.Tensor:
    """SiTU: `beta·tanh(gate/beta)·σ(gate) · linear_beta·tanh(up/linear_beta)`, computed in fp32."""
    g, u = gate.float(), up.float()
    a = beta * torch.tanh(g / beta) * torch.sigmoid(g)
    b = linear_beta * torch.tanh(u / linear_beta)
    return (a * b).to(gate.dtype)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def activation(config: K3Config):
    """The gated activation `act(gate, up)` the config asks for."""
    if config.hidden_act == "situ":
        beta, lin = config.activation_situ_beta, config.activation_situ_linear_beta
        return lambda g, u: situ_and_mul(g, u, beta, lin)
    return silu_and_mul


class GatedMLP(nn.Module):
    """`down(act(gate(x), up(x)))`: the layer-0 dense MLP and the shared experts."""

    def __init__(self, config: K3Config, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias=False)
        self.up_proj = Linear(hidden, intermediate, bias=False)
        self.down_proj = Linear(intermediate, hidden, bias=False)
        self.act = activation(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x), self.up_proj(x)))


class Expert(nn.Module):
    """One routed expert with the official names: `w2(act(w1 z, w3 z))`.

    w1/w2/w3 are `Linear` or, for MXFP4 checkpoints, `MXFP4Linear` (same call signature).
    """

    def __init__(self, config: K3Config, hidden: int, intermediate: int, linear=Linear) -> None:
        super().__init__()
        self.w1 = linear(hidden, intermediate, bias=False)
        self.w3 = linear(hidden, intermediate, bias=False)
        self.w2 = linear(intermediate, hidden, bias=False)
        self.act = activation(config)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.w2(self.act(self.w1(z), self.w3(z)))
