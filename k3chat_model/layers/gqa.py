"""Grouped-query attention with RoPE — a full-attention type K3 itself does not use.

It lets converted models (the default `k3-smol`, from a Llama-style teacher) keep their
attention exactly. HF Llama conventions: rotate-half RoPE, `q/k/v/o_proj` names, no biases.
"""

from __future__ import annotations

import torch
from torch import nn

from ..cache import GQACache
from ..config import K3Config
from .linear import Linear
from .sdpa import attention


def rope_cos_sin(
    positions: torch.Tensor, dim: int, theta: float, inv: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [T] -> cos, sin [T, dim] (fp32), HF rotate-half layout."""
    if inv is None:
        inv = 1.0 / (
            theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)
        )
    ang = positions.float()[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, h, D] in any dtype; rotation computed in fp32."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rot = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos[:, None, :] + rot * sin[:, None, :]).to(x.dtype)


def causal_mask(t_q: int, t_k: int, device: torch.device) -> torch.Tensor:
    """Bool [t_q, t_k]: query i (absolute position t_k − t_q + i) sees keys ≤ its position."""
    offset = t_k - t_q
    q = torch.arange(t_q, device=device)[:, None] + offset
    return torch.arange(t_k, device=device)[None, :] <= q


class GQAAttention(nn.Module):
    def __init__(self, config: K3Config, layer_idx: int) -> None:
        super().__init__()
        H = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads or self.n_heads
        self.head_dim = config.gqa_head_dim
        self.theta = config.rope_theta
        self.q_proj = Linear(H, self.n_heads * self.head_dim, bias=False)
        self.k_proj = Linear(H, self.n_kv * self.head_dim, bias=False)
        self.v_proj = Linear(H, self.n_kv * self.head_dim, bias=False)
        self.o_proj = Linear(self.n_heads * self.head_dim, H, bias=False)
        self._inv_freq: torch.Tensor | None = None

    def forward(
        self, x: torch.Tensor, cache: GQACache | None = None, start: int = 0
    ) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)
        if self._inv_freq is None or self._inv_freq.device != x.device:
            self._inv_freq = 1.0 / (
                self.theta
                ** (
                    torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=x.device)
                    / self.head_dim
                )
            )
        pos = torch.arange(start, start + T, device=x.device)
        cos, sin = rope_cos_sin(pos, self.head_dim, self.theta, self._inv_freq)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k = cache.bufs["k"].append(k)
            v = cache.bufs["v"].append(v)
        Tk = k.shape[1]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, h, T, D]
        mask = None if Tk == T or T == 1 else causal_mask(T, Tk, x.device)
        o = attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=Tk == T and T > 1,
            enable_gqa=self.n_kv != self.n_heads,
        )
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))
