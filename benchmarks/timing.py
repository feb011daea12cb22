"""Shared by the benchmark scripts (run as `python benchmarks/NAME.py`, so this is importable)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls after one warm-up call (allocator, MKL, caches)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def kda_qkv_beta(tokens: int, heads: int, dim: int = 64) -> tuple[torch.Tensor, ...]:
    """Seeded KDA inputs (q, k unit-norm; beta in (0, 1)), batch 1, fp32.

    Seeds the global generator with 0 and leaves it where the draws end, so a caller's next
    `torch.randn` (a gate) is the same on every run.
    """
    torch.manual_seed(0)
    shape = (1, tokens, heads, dim)
    q, k = (torch.nn.functional.normalize(torch.randn(shape), dim=-1) for _ in range(2))
    return q, k, torch.randn(shape), torch.sigmoid(torch.randn(shape[:3]))
