"""Scaled dot-product attention that stays fast in bf16 on CPUs without native bf16 matmul.

torch's CPU attention kernel multiplies bf16 blocks in the same slow fallback as `linear.py`'s
products on AVX2 CPUs (Zen 1–3, most Intel desktop chips). On a 2-core Zen 3
(`benchmarks/cpu_bf16.py`): one decode step against 4,096 cached tokens took 2.9 ms in bf16 and
0.8 ms with q, k and v converted to fp32 first; stage 2's forward + backward at 2 × 512 tokens
220 ms against 41 ms; a causal prefill was the same either way. So on such CPUs bf16 attention
runs in fp32 and is rounded back to bf16 (the kernel accumulates in fp32 too); elsewhere it is
plain `F.scaled_dot_product_attention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear import cpu_bf16_is_slow


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """`F.scaled_dot_product_attention` on [B, heads, T, D] tensors, in fp32 where bf16 is slow."""
    kw = {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa}
    if q.device.type == "cpu" and _bf16(q) and cpu_bf16_is_slow():
        with torch.autocast("cpu", enabled=False):
            o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw)
        return o.to(torch.bfloat16)
    return F.scaled_dot_product_attention(q, k, v, **kw)


def _bf16(q: torch.Tensor) -> bool:
    """Would torch run this attention in bf16 (bf16 inputs, or bf16 autocast)?"""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return q.dtype == torch.bfloat16
