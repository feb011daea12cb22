"""Block Attention Residuals (spec §2.2-2.3).

Each site blends the completed block representations and the running in-block sum with a
softmax over depth: `k_i = RMSNorm(v_i)`, `score_i = Σ_d k_i·w_norm·w_q`, `out = Σ_i p_i v_i`,
all in fp32, cast back to the stream's dtype. No 1/sqrt(d), no bias, no temperature.

A site whose query `w_q` is zero scores every source 0, so its softmax is uniform and the blend
is the plain mean of the sources. Converted dense models start that way (k3-smol: every site,
which is what makes it compute the original Llama, since the mean only rescales the residual sum
and RMSNorm follows), and there the full blend was about 30% of a forward on the CPU. Such a
site takes `uniform_blend` instead: the same values, without the norms and scores.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from .zero import is_zero


def attn_res(
    prefix: torch.Tensor,
    blocks: list[torch.Tensor],
    w_norm: torch.Tensor,
    w_q: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """prefix: [B, T, H]; blocks: list of [B, T, H]; w_norm: [H]; w_q: [1, H] -> [B, T, H]."""
    v = torch.stack([*blocks, prefix], dim=-2).float()  # [B, T, S, H]
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    score = (k * (w_norm.float() * w_q.float().reshape(-1))).sum(-1)  # [B, T, S]
    p = torch.softmax(score, dim=-1)
    return (p.unsqueeze(-1) * v).sum(-2).to(prefix.dtype)


@functools.cache
def _uniform_weight(n: int) -> float:
    """softmax over n equal scores, as `attn_res` computes it in fp32 (so results match bitwise)."""
    return torch.softmax(torch.zeros(n), 0)[0].item()


class Blocks(list):
    """The completed block representations of one forward pass (the embedding is block 0).

    Every site until the next block closes sees the same blocks, so a uniform blend's weighted
    sum over them is computed once and kept here (`uniform_blend`). The model makes a new
    `Blocks` when a block closes; one lives for one forward.
    """

    def __init__(self, items=()) -> None:  # noqa: ANN001
        super().__init__(items)
        self.uniform_partial: tuple[int, torch.Tensor] | None = None


def uniform_blend(prefix: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
    """`attn_res` when every score is equal: Σ p·v over blocks then prefix, in fp32, cast back.

    Same operations in the same order as `attn_res`'s weighted sum, so on the CPU the result is
    bit-identical (a test checks it); only the norms, scores and softmax are skipped. The sum
    over `blocks` is reused from a `Blocks` that already holds it.
    """
    p = _uniform_weight(len(blocks) + 1)
    if not blocks:
        return (prefix.float() * p).to(prefix.dtype)
    memo = blocks.uniform_partial if isinstance(blocks, Blocks) else None
    if memo is not None and memo[0] == len(blocks):
        partial = memo[1]
    else:
        partial = blocks[0].float() * p
        for v in blocks[1:]:
            partial = partial + v.float() * p
        if isinstance(blocks, Blocks):
            blocks.uniform_partial = (len(blocks), partial)
    return (partial + prefix.float() * p).to(prefix.dtype)


class AttnResSite(nn.Module):
    """One blend site. Checkpoint `<site>_res_norm.weight` [H] -> `norm_weight`,
    `<site>_res_proj.weight` [1, H] -> `proj_weight` (direct parameters, so offload hooks see them)."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(hidden))
        self.proj_weight = nn.Parameter(torch.zeros(1, hidden))
        self.eps = eps
        self._zero_query: dict = {}

    def forward(self, prefix: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
        trains_query = self.proj_weight.requires_grad and torch.is_grad_enabled()
        if not trains_query and is_zero(self.proj_weight, self._zero_query):
            return uniform_blend(prefix, blocks)
        return attn_res(prefix, blocks, self.norm_weight, self.proj_weight, self.eps)
