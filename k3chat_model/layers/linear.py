"""`nn.Linear` that keeps many-row bf16 products fast on CPUs without native bf16 matmul.

On an x86 CPU without AVX512-BF16 or AMX (AVX2 machines: Zen 1–3, most Intel desktop chips),
torch multiplies bf16 matrices in a slow fallback kernel: on a 2-core Zen 3 a 512-row product
runs 8.4× slower than the same product in fp32, while a one-row product (decode) is 1.7× faster
than converting the weight to fp32 first (`benchmarks/cpu_bf16.py`, docs/benchmarks.md). So weights stay bf16
(memory, decode speed) and products of at least `FP32_MIN_ROWS` rows — prefill, batched
generation — run in fp32 on such CPUs and are rounded back to bf16. That is the result the bf16
kernel computes (it too accumulates in fp32), up to summation order.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

FP32_MIN_ROWS = 16
"""Rows from which fp32 beats the bf16 fallback (Zen 3: 2.6× at 16 rows; 0.8–1.8× at 8)."""

FP32_BLOCK_BYTES = 64 << 20
"""Largest fp32 weight copy the fp32 path makes at once (k3-smol's largest, its head, is 113 MB)."""

MODE_ENV = "K3CHAT_CPU_BF16"
"""`native` keeps every product in bf16, `fp32` forces the fp32 path; unset: detect."""


@cache
def cpu_bf16_is_slow() -> bool:
    """True on x86 CPUs whose bf16 matmuls take torch's fallback kernel (no AVX512-BF16, no AMX).

    Other architectures keep bf16: unmeasured here, and their bf16 kernels differ."""
    mode = os.environ.get(MODE_ENV, "").strip().lower()
    if mode in ("native", "fp32"):
        return mode == "fp32"
    if mode:
        print(f"k3chat: ignoring {MODE_ENV}={mode!r} (use native or fp32)", file=sys.stderr)
    if platform.machine().lower() not in ("x86_64", "amd64", "x86", "i686"):
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    found = [getattr(torch.cpu, p, None) for p in probes]
    if not any(found):  # an older torch without the probes: keep bf16 as before
        return False
    return not any(f() for f in found if f is not None)


def _bf16_product(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Would torch run this product as bf16 (both operands, or autocast to bf16)?"""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, taking the fp32 path for many-row bf16 products where bf16 is slow.

    Under bf16 autocast (distillation's stage 2) the result is bf16 as autocast's would be, and
    the backward's products run in fp32 too."""
    if (
        x.device.type == "cpu"
        and x.numel() >= FP32_MIN_ROWS * x.shape[-1]
        and _bf16_product(x, weight)
        and cpu_bf16_is_slow()
    ):
        with torch.autocast("cpu", enabled=False):
            return _fp32_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _fp32_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """bf16 `x @ weightᵀ + bias` computed in fp32, the weight converted `FP32_BLOCK_BYTES` at a
    time: a large model's head (163,840 × 7,168) would otherwise need a 4.7 GB fp32 copy."""
    x32 = x.float()
    rows = max(1, FP32_BLOCK_BYTES // (4 * weight.shape[1]))
    if weight.shape[0] <= rows:
        b = None if bias is None else bias.float()
        return F.linear(x32, weight.float(), b).to(torch.bfloat16)
    blocks = []
    for i in range(0, weight.shape[0], rows):
        b = None if bias is None else bias[i : i + rows].float()
        blocks.append(F.linear(x32, weight[i : i + rows].float(), b).to(torch.bfloat16))
    return torch.cat(blocks, dim=-1)


class Linear(nn.Linear):
    """`nn.Linear` with `linear`'s CPU fast path; same parameters, names and checkpoints."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
