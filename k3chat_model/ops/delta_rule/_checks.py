"""Argument checks shared by the fast KDA ops: fail early with expected-vs-got, not deep in torch."""

from __future__ import annotations

import torch


def check_kda_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
) -> None:
    """Raise ValueError naming the first argument whose shape or dtype is wrong."""
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, V] = [{B}, {T}, {H}, V], got {tuple(v.shape)}")
    V = v.shape[-1]
    for name, x, want in (
        ("k", k, (B, T, H, K)),
        ("g", g, (B, T, H, K)),
        ("beta", beta, (B, T, H)),
    ):
        if tuple(x.shape) != want:
            raise ValueError(f"{name} must have shape {list(want)}, got {list(x.shape)}")
    if initial_state is not None:
        if tuple(initial_state.shape) != (B, H, K, V):
            raise ValueError(
                f"initial_state must have shape {[B, H, K, V]}, got {list(initial_state.shape)}"
            )
        if initial_state.dtype not in (torch.float32, torch.float64):
            raise ValueError(
                f"initial_state must be fp32 (the recurrence drifts in lower precision), "
                f"got {initial_state.dtype}"
            )
