"""Attention's fp32 path on CPUs without native bf16 (`layers/sdpa.py`).

Both paths run on any machine (the mode is forced), so CI checks them whatever its CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from k3chat_model.layers.sdpa import attention


def _qkv(queries: int, keys: int, seed: int = 0, grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, h, n, 32, generator=g).bfloat16().requires_grad_(grad)
        for h, n in ((6, queries), (2, keys), (2, keys))
    ]


def _reference(q, k, v, causal: bool) -> torch.Tensor:  # noqa: ANN001
    """Plain float64 softmax attention, KV heads shared by groups of query heads."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        Tq, Tk = s.shape[-2:]
        s = s.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(Tk - Tq + 1), float("-inf"))
    return s.softmax(-1) @ v


@pytest.mark.parametrize("queries,keys", [(1, 300), (64, 64)])
def test_fp32_path_returns_bf16_as_close_to_float64_as_the_bf16_kernel(
    bf16_mode, queries, keys
) -> None:
    q, k, v = _qkv(queries, keys, seed=queries)
    causal = queries == keys
    ref = _reference(q, k, v, causal)

    def rel(o: torch.Tensor) -> float:
        return float((o.double() - ref).norm() / ref.norm())

    bf16_mode("native")
    native = attention(q, k, v, is_causal=causal, enable_gqa=True)
    bf16_mode("fp32")
    fast = attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert fast.dtype == torch.bfloat16
    assert torch.equal(
        fast,
        F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True
        ).bfloat16(),
    )
    assert rel(fast) <= rel(native) * 1.05 + 1e-6
    assert rel(fast) < 5e-3  # bf16 rounding of inputs and output only


def test_native_cpus_and_fp32_inputs_keep_torchs_kernel(bf16_mode) -> None:
    q, k, v = _qkv(16, 16)
    bf16_mode("native")
    assert torch.equal(
        attention(q, k, v, is_causal=True, enable_gqa=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
    )
    bf16_mode("fp32")
    q, k, v = (t.float() for t in (q, k, v))
    out = attention(q, k, v, is_causal=True, enable_gqa=True)
    assert out.dtype == torch.float32
    assert torch.equal(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    )


def test_under_bf16_autocast_the_fp32_path_trains_with_autocasts_output_dtype(bf16_mode) -> None:
    """Stage 2 runs the student under bf16 autocast: bf16 out, gradients back to every input."""
    bf16_mode("fp32")
    q, k, v = (t.float().detach().requires_grad_(True) for t in _qkv(32, 32, seed=5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q, k, v, is_causal=True, enable_gqa=True)
    assert out.dtype == torch.bfloat16
    out.float().pow(2).sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True, enable_gqa=True)
    ref.pow(2).sum().backward()
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert float((got.double() - want).norm() / want.norm()) < 2e-2
