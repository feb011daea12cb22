"""KDA decay-gate activations (research/k3-architecture.md §2.5 step 4), in fp32.

K3 (lower bound set):  g = lb · sigmoid(exp(A_log[h]) · (g_raw + dt_bias))   in (lb, 0)
Kimi Linear [PREDECESSOR]:  g = -exp(A_log[h]) · softplus(g_raw + dt_bias)   in (-inf, 0)

`A_log` may be longer than H: K3 checkpoints store [128] for 96 heads with the tail zero, and
the reference kernel reads only A_log[:H], so the same is done here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _prepare(
    g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    H, K = g_raw.shape[-2:]
    if A_log.numel() < H or dt_bias.numel() != H * K:
        raise ValueError(
            f"gate for [..., {H}, {K}] needs A_log with >= {H} values and dt_bias with {H * K}, "
            f"got A_log {list(A_log.shape)}, dt_bias {list(dt_bias.shape)}"
        )
    x = g_raw.float() + dt_bias.float().view(H, K)  # [..., H, K]
    return x, A_log.float().reshape(-1)[:H].exp().unsqueeze(-1)  # [H, 1]


def kda_gate_lowerbound(
    g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float
) -> torch.Tensor:
    """K3 gate: `[..., H, K]` raw projection to fp32 log-decay in (lower_bound, 0)."""
    x, a = _prepare(g_raw, A_log, dt_bias)
    return lower_bound * torch.sigmoid(a * x)


def kda_gate_softplus(
    g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> torch.Tensor:
    """Kimi Linear gate: `[..., H, K]` raw projection to fp32 log-decay <= 0 (unbounded)."""
    x, a = _prepare(g_raw, A_log, dt_bias)
    return -a * F.softplus(x)
