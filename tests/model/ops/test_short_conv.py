"""KDA's depthwise causal short conv (`layers/kda.ShortConv`) against a plain float64 loop.

It has two paths: a sum over K-wide windows for short inputs (decode) and `conv1d` for long ones
(prefill). Both must match the reference, and decoding token by token through the tail must give
what one prefill gives.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from k3chat_model.layers.kda import CONV_WINDOW_MAX_TOKENS, ShortConv


def naive_short_conv(x: torch.Tensor, tail: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y[t, c] = silu(Σ_j w[c, j] · xs[t + j, c]) over xs = tail ++ x, in float64."""
    xs = torch.cat([tail, x], dim=1).double()
    K, T = weight.shape[-1], x.shape[1]
    w = weight.double().view(weight.shape[0], K)
    y = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(T):
        for j in range(K):
            y[:, t] += w[:, j] * xs[:, t + j]
    return F.silu(y)


def _conv(channels: int = 24, kernel: int = 4) -> ShortConv:
    conv = ShortConv(channels, kernel)
    with torch.no_grad():
        conv.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    return conv


@pytest.mark.parametrize("T", [1, 3, CONV_WINDOW_MAX_TOKENS, CONV_WINDOW_MAX_TOKENS + 1, 50])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_both_paths_match_the_float64_reference(T: int, dtype: torch.dtype) -> None:
    conv = _conv()
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, T, 24, generator=g).to(dtype)
    tail = torch.randn(2, 3, 24, generator=g).to(dtype)
    y, new_tail = conv(x, tail)
    ref = naive_short_conv(x, tail, conv.weight)
    assert y.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # bf16: the output's rounding
    assert float((y.double() - ref).norm() / ref.norm()) < tol
    assert torch.equal(new_tail, torch.cat([tail, x], dim=1)[:, -3:])


def test_token_by_token_decode_gives_the_prefill_result() -> None:
    conv = _conv()
    x = torch.randn(1, 40, 24, generator=torch.Generator().manual_seed(5))
    whole, _ = conv(x, None)  # conv1d path
    tail, steps = None, []
    for t in range(40):  # window path, one token at a time
        y, tail = conv(x[:, t : t + 1], tail)
        steps.append(y)
    assert torch.allclose(torch.cat(steps, dim=1), whole, rtol=1e-5, atol=1e-6)
