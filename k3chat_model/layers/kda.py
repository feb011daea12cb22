"""Kimi Delta Attention (spec §2.5; Kimi Linear, arXiv 2510.26692).

Gate (K3):          g = lb · σ(exp(A_log[h]) · (f_b(f_a(x)) + dt_bias))      in (lb, 0), fp32
Gate (Kimi Linear): g = −exp(A_log[h]) · softplus(f_b(f_a(x)) + dt_bias)
State update:       S_t = (I − β k kᵀ) Diag(e^g) S_{t−1} + β k vᵀ,   o_t = S_tᵀ (q / √K)
Shapes: x [B, T, hidden] -> q, k [B, T, H, K], v [B, T, H, V], S [B, H, K, V] (fp32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..cache import KDAState
from ..config import K3Config
from ..ops.delta_rule import chunk_kda, fused_recurrent_kda
from .linear import Linear
from .norm import GatedRMSNorm

RECURRENT_MAX_TOKENS = 8
"""Steps up to which the per-token recurrence beats the chunked path."""


CONV_WINDOW_MAX_TOKENS = 16
"""Steps up to which the short conv is a sum over windows: `conv1d` costs ~120 µs a call whatever
the length (one decode token: 124 vs 20 µs at 576 channels on one Zen 3 thread). Not the
shift-and-add sum of `distill.kda_train.short_conv_train`, which suits training's backward but
takes 40 µs for one token against `unfold`'s 15."""


class ShortConv(nn.Module):
    """Depthwise causal conv + SiLU; `weight` [C, 1, K] (stored fp32), w[..., K−1] hits the current token."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        self.kernel = kernel

    def forward(
        self, x: torch.Tensor, tail: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, C]; tail [B, K−1, C] (the previous inputs) -> (y [B, T, C], new tail)."""
        B, T, C = x.shape
        if tail is None:
            tail = x.new_zeros(B, self.kernel - 1, C)
        xs = torch.cat([tail.to(x.dtype), x], dim=1)  # [B, K−1+T, C]
        if T <= CONV_WINDOW_MAX_TOKENS:  # decode: a weighted sum over K-wide windows
            windows = xs.float().unfold(1, self.kernel, 1)  # [B, T, C, K]
            y = (windows * self.weight.float().view(C, self.kernel)).sum(-1)  # [B, T, C]
        else:
            y = F.conv1d(xs.transpose(1, 2).float(), self.weight.float(), groups=C).transpose(1, 2)
        return F.silu(y).to(x.dtype), xs[:, xs.shape[1] - (self.kernel - 1) :]


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """`x / sqrt(Σx² + eps)` in fp32 (eps inside the sqrt, as FLA and FlashKDA do)."""
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)


class KimiDeltaAttention(nn.Module):
    def __init__(self, config: K3Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.H, self.D = config.kda_num_heads, config.kda_head_dim
        C = self.H * self.D
        self.lower_bound = config.kda_gate_lower_bound
        self.q_proj = Linear(hidden, C, bias=False)
        self.k_proj = Linear(hidden, C, bias=False)
        self.v_proj = Linear(hidden, C, bias=False)
        self.q_conv1d = ShortConv(C, config.kda_conv_kernel)
        self.k_conv1d = ShortConv(C, config.kda_conv_kernel)
        self.v_conv1d = ShortConv(C, config.kda_conv_kernel)
        self.f_a_proj = Linear(hidden, self.D, bias=False)
        self.f_b_proj = Linear(self.D, C, bias=False)
        self.A_log = nn.Parameter(torch.zeros(self.H))
        self.dt_bias = nn.Parameter(torch.zeros(C))
        self.b_proj = Linear(hidden, self.H, bias=False)
        if config.kda_full_rank_gate:
            self.g_proj = Linear(hidden, C, bias=False)
        else:
            self.g_a_proj = Linear(hidden, self.D, bias=False)
            self.g_b_proj = Linear(self.D, C, bias=False)
        self.o_norm = GatedRMSNorm(self.D, config.rms_norm_eps)
        self.o_proj = Linear(C, hidden, bias=False)

    def decay(self, g_raw: torch.Tensor) -> torch.Tensor:
        """g_raw [B, T, H, D] -> log-decay g (≤ 0), fp32."""
        a = self.A_log.float().exp()[:, None]  # [H, 1]
        z = g_raw.float() + self.dt_bias.float().view(self.H, self.D)
        if self.lower_bound is not None:
            return self.lower_bound * torch.sigmoid(a * z)
        return -a * F.softplus(z)

    def forward(
        self, x: torch.Tensor, cache: KDAState | None = None, start: int = 0
    ) -> torch.Tensor:
        B, T, _ = x.shape
        tails = cache.conv if cache is not None else [None, None, None]
        q, tq = self.q_conv1d(self.q_proj(x), tails[0])
        k, tk = self.k_conv1d(self.k_proj(x), tails[1])
        v, tv = self.v_conv1d(self.v_proj(x), tails[2])
        q = l2_normalize(q.view(B, T, self.H, self.D))
        k = l2_normalize(k.view(B, T, self.H, self.D))
        v = v.view(B, T, self.H, self.D).float()
        g = self.decay(self.f_b_proj(self.f_a_proj(x)).view(B, T, self.H, self.D))
        beta = torch.sigmoid(self.b_proj(x).float())  # [B, T, H]
        S0 = cache.recurrent if cache is not None else None
        op = fused_recurrent_kda if T <= RECURRENT_MAX_TOKENS else chunk_kda
        o, S = op(
            q,
            k,
            v,
            g,
            beta,
            scale=self.D**-0.5,
            initial_state=S0,
            output_final_state=cache is not None,
        )
        if cache is not None:
            cache.conv, cache.recurrent = [tq, tk, tv], S
        gate = self.g_proj(x) if hasattr(self, "g_proj") else self.g_b_proj(self.g_a_proj(x))
        o = self.o_norm(o, gate.view(B, T, self.H, self.D))
        return self.o_proj(o.to(x.dtype).reshape(B, T, -1))
