from __future__ import annotations

import pytest
import torch

from k3chat_model.ops.kda_gate import kda_gate_lowerbound, kda_gate_softplus


def inputs(H=3, K=8, stored_heads=4):
    gen = torch.Generator().manual_seed(0)
    g_raw = 4 * torch.randn(2, 5, H, K, generator=gen, dtype=torch.float64)
    # stored like the K3 checkpoint: longer than H, tail zero
    A_log = torch.zeros(stored_heads, dtype=torch.float64)
    A_log[:H] = torch.randn(H, generator=gen, dtype=torch.float64)
    dt_bias = torch.randn(H * K, generator=gen, dtype=torch.float64)
    return g_raw, A_log, dt_bias


def test_lowerbound_gate_matches_float64_formula_and_stays_in_bounds(assert_close):
    g_raw, A_log, dt_bias = inputs()
    H, K = g_raw.shape[-2:]
    x = g_raw + dt_bias.view(H, K)
    ref = -5.0 * torch.sigmoid(A_log[:H].exp()[:, None] * x)
    g = kda_gate_lowerbound(g_raw.bfloat16(), A_log.float(), dt_bias.float(), -5.0)
    assert g.dtype == torch.float32
    # sigmoid saturates in fp32, so the bound itself is reachable; chunk_kda is safe there
    assert ((g >= -5.0) & (g <= 0)).all()
    assert_close("g", ref, g, 1e-2)  # bf16 g_raw input
    assert_close(
        "g fp32 in",
        ref,
        kda_gate_lowerbound(g_raw.float(), A_log.float(), dt_bias.float(), -5.0),
        1e-6,
    )


def test_softplus_gate_matches_float64_formula(assert_close):
    g_raw, A_log, dt_bias = inputs()
    H, K = g_raw.shape[-2:]
    ref = -A_log[:H].exp()[:, None] * torch.nn.functional.softplus(g_raw + dt_bias.view(H, K))
    g = kda_gate_softplus(g_raw.float(), A_log.float(), dt_bias.float())
    assert (g <= 0).all()
    assert_close("g", ref, g, 1e-6)


def test_gate_with_too_few_head_parameters_is_rejected():
    g_raw, A_log, dt_bias = inputs()
    with pytest.raises(ValueError, match="dt_bias with 24"):
        kda_gate_lowerbound(g_raw, A_log, dt_bias[:-1], -5.0)
