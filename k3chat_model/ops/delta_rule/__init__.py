"""Kimi Delta Attention ops (research/k3-architecture.md §2.5): fast forms only.

The per-token reference lives in `naive.py` and is imported from there by tests.
"""

from __future__ import annotations

import torch

from k3chat_model.ops.delta_rule.chunk import chunk_kda
from k3chat_model.ops.delta_rule.recurrent import fused_recurrent_kda

# at or below this many tokens the per-token loop wins (see docs/benchmarks-kda.md)
RECURRENT_MAX_T = 32

__all__ = ["chunk_kda", "fused_recurrent_kda", "kda", "RECURRENT_MAX_T"]


def kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run KDA with the faster form for this length: per-token for decode, chunked for prefill.

    Same arguments and return as `chunk_kda` / `fused_recurrent_kda`.
    """
    fn = fused_recurrent_kda if q.shape[1] <= RECURRENT_MAX_T else chunk_kda
    return fn(q, k, v, g, beta, scale, initial_state, output_final_state)
