"""The differentiable chunked KDA agrees with the per-token recurrence and the engine layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from k3chat_model.distill.hybrid import kda_config
from k3chat_model.distill.kda_train import (
    TrainableKDA,
    chunk_kda_train,
    kda_forward_train,
    short_conv_train,
)
from k3chat_model.layers.kda import ShortConv
from k3chat_model.ops.delta_rule.naive import naive_recurrent_kda


def _inputs(B: int, T: int, H: int, K: int, dtype: torch.dtype, g_lo: float = -5.0):
    g = torch.Generator().manual_seed(T)
    q = F.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, K, generator=g, dtype=dtype)
    gate = g_lo * torch.rand(B, T, H, K, generator=g, dtype=dtype)
    beta = torch.rand(B, T, H, generator=g, dtype=dtype)
    return q, k, v, gate, beta


@pytest.mark.parametrize("T", [1, 15, 16, 37])
def test_matches_recurrence_float64(T: int) -> None:
    q, k, v, g, beta = _inputs(2, T, 3, 8, torch.float64)
    got = chunk_kda_train(q, k, v, g, beta)
    ref, _ = naive_recurrent_kda(q, k, v, g, beta)
    assert ((got - ref).norm() / ref.norm()).item() < 1e-12


def test_gradients_match_recurrence_float64() -> None:
    args = [x.requires_grad_() for x in _inputs(1, 20, 2, 8, torch.float64)]
    w = torch.randn(1, 20, 2, 8, dtype=torch.float64)
    grads = torch.autograd.grad((chunk_kda_train(*args) * w).sum(), args)
    ref = torch.autograd.grad((naive_recurrent_kda(*args)[0] * w).sum(), args)
    for a, b in zip(grads, ref, strict=True):
        assert ((a - b).norm() / b.norm()).item() < 1e-10


def test_fp32_gradients_finite_with_gates_at_lower_bound() -> None:
    """Gates pinned near −5 gave NaN gradients when β was applied before the causal mask."""
    args = list(_inputs(1, 64, 2, 16, torch.float32, g_lo=-5.0))
    args[3] = torch.full_like(args[3], -4.99)
    args = [x.requires_grad_() for x in args]
    chunk_kda_train(*args).square().sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in args)


def test_layer_forward_matches_engine_layer(teacher) -> None:
    cfg = kda_config(teacher.config, [1])
    torch.manual_seed(1)
    mod = TrainableKDA(cfg, 1).float()
    with torch.no_grad():
        for p in mod.parameters():
            p.normal_(0, 0.2)
    x = torch.randn(2, 40, 64)
    got = kda_forward_train(mod, x)
    with torch.no_grad():
        ref = mod(x)  # no grad: the engine's chunked inference op
    assert ((got - ref).norm() / ref.norm()).item() < 1e-4
    got.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mod.parameters())


def test_short_conv_train_matches_engine_conv_with_gradients() -> None:
    """The shift-sum training conv gives the engine's depthwise conv1d values and gradients."""
    conv = ShortConv(6, 4).double()
    with torch.no_grad():
        conv.weight.normal_()
    x = torch.randn(2, 9, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 9, 6, dtype=torch.float64)
    got = short_conv_train(conv, x)
    grads = torch.autograd.grad((got * w).sum(), [x, conv.weight])
    ref = conv(x, None)[0]
    ref_grads = torch.autograd.grad((ref * w).sum(), [x, conv.weight])
    assert ((got - ref).norm() / ref.norm()).item() < 1e-6  # the fp32 compute of both
    for a, b in zip(grads, ref_grads, strict=True):
        assert ((a - b).norm() / b.norm()).item() < 1e-6
