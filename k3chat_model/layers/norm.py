"""RMSNorm as Kimi computes it (spec §6): fp32 statistics, cast to the input dtype, then scale."""

from __future__ import annotations

import torch
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Normalise the last dim in fp32; multiply by `weight` after casting back (KimiRMSNorm order)."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def gated_rms_norm(
    o: torch.Tensor, weight: torch.Tensor, gate: torch.Tensor, eps: float
) -> torch.Tensor:
    """Per-head output norm of KDA (spec §2.5 step 7): `o·rstd·w·σ(gate)`, all in fp32.

    o, gate: [..., H, D]; weight: [D] shared by every head. Returns o's dtype.
    """
    of = o.float()
    y = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (y * torch.sigmoid(gate.float())).to(o.dtype)


class GatedRMSNorm(nn.Module):
    """KDA's `o_norm`: one [D] weight shared by every head; see `gated_rms_norm`."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return gated_rms_norm(o, self.weight, gate, self.eps)
