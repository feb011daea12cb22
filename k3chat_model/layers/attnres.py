"""Block Attention Residuals (spec §2.2-2.3).

Each site blends the completed block representations and the running in-block sum with a
softmax over depth: `k_i = RMSNorm(v_i)`, `score_i = Σ_d k_i·w_norm·w_q`, `out = Σ_i p_i v_i`,
all in fp32, cast back to the stream's dtype. No 1/sqrt(d), no bias, no temperature.
"""

from __future__ import annotations

import torch
from torch import nn


def attn_res(prefix: torch.Tensor, blocks: list[torch.Tensor], w_norm: torch.Tensor,
             w_q: torch.Tensor, eps: float) -> torch.Tensor:
    """prefix: [B, T, H]; blocks: list of [B, T, H]; w_norm: [H]; w_q: [1, H] -> [B, T, H]."""
    v = torch.stack([*blocks, prefix], dim=-2).float()                     # [B, T, S, H]
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    score = (k * (w_norm.float() * w_q.float().reshape(-1))).sum(-1)        # [B, T, S]
    p = torch.softmax(score, dim=-1)
    return (p.unsqueeze(-1) * v).sum(-2).to(prefix.dtype)


class AttnResSite(nn.Module):
    """One blend site. Checkpoint `<site>_res_norm.weight` [H] -> `norm_weight`,
    `<site>_res_proj.weight` [1, H] -> `proj_weight` (direct parameters, so offload hooks see them)."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(hidden))
        self.proj_weight = nn.Parameter(torch.zeros(1, hidden))
        self.eps = eps

    def forward(self, prefix: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
        return attn_res(prefix, blocks, self.norm_weight, self.proj_weight, self.eps)
