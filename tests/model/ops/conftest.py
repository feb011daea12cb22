"""Shared helpers for the ops tests: one closeness check, and NaN-filled `torch.empty`."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch


def _assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, ratio: float) -> None:
    """Fail unless ||out - ref||_rms / ||ref||_rms <= ratio; print max-abs diff and the ratio."""
    assert out.shape == ref.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    out64, ref64 = out.detach().double(), ref.detach().double()
    assert torch.isfinite(out64).all(), f"{name}: output has NaN/inf"
    diff = out64 - ref64
    rms_ratio = diff.pow(2).mean().sqrt().item() / max(ref64.pow(2).mean().sqrt().item(), 1e-300)
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    print(f"{name:>12}: max abs diff {max_abs:.3e}, rms ratio {rms_ratio:.3e} (limit {ratio:.0e})")
    assert not math.isnan(rms_ratio) and rms_ratio <= ratio, (
        f"{name}: rms ratio {rms_ratio:.3e} > {ratio:.0e} (max abs diff {max_abs:.3e})"
    )


@pytest.fixture
def assert_close() -> Callable[[str, torch.Tensor, torch.Tensor, float], None]:
    return _assert_close


@pytest.fixture(autouse=True)
def nan_filled_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    # an op that reads memory it never wrote then fails loudly instead of passing by luck
    real_empty = torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", empty)


@pytest.fixture(autouse=True)
def two_threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))
