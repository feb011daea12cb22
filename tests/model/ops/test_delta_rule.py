from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from k3chat_model.ops.delta_rule import chunk_kda, fused_recurrent_kda, kda
from k3chat_model.ops.delta_rule.naive import naive_recurrent_kda


def make_inputs(B, T, H, K, V, gate="mixed", seed=0):
    """float64 KDA inputs: L2-normalised q/k, post-sigmoid beta, activated gates."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = F.normalize(randn(B, T, H, K), dim=-1)
    k = F.normalize(randn(B, T, H, K), dim=-1)
    v = randn(B, T, H, V)
    beta = torch.sigmoid(randn(B, T, H))
    if gate == "mixed":  # K3 form: -5 * sigmoid(.), spread over the whole (-5, 0) range
        g = -5.0 * torch.sigmoid(3 * randn(B, T, H, K))
    elif gate == "bound":  # every step pinned at K3's lower bound
        g = -5.0 + 1e-6 * torch.rand(B, T, H, K, generator=gen, dtype=torch.float64)
    elif gate == "strong":  # beyond K3's bound, as Kimi Linear's softplus gate allows
        g = -40.0 * torch.sigmoid(3 * randn(B, T, H, K))
    else:
        raise AssertionError(gate)
    S0 = randn(B, H, K, V)
    return q, k, v, g, beta, S0


def f32(*xs):
    return tuple(x.float() for x in xs)


@pytest.mark.parametrize(
    "B,T,H,K,V,C,gate",
    [
        (2, 300, 3, 32, 24, 64, "mixed"),
        (2, 64, 2, 16, 16, 64, "mixed"),
        (1, 37, 2, 16, 8, 16, "mixed"),
        (2, 200, 2, 16, 16, 32, "bound"),
        (1, 130, 2, 16, 16, 128, "bound"),
        (2, 150, 2, 16, 16, 64, "strong"),
    ],
    ids=lambda p: str(p),
)
def test_chunk_matches_naive_recurrent(B, T, H, K, V, C, gate, assert_close):
    q, k, v, g, beta, S0 = make_inputs(B, T, H, K, V, gate)
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    o, S = chunk_kda(
        *f32(q, k, v, g, beta), initial_state=S0.float(), output_final_state=True, chunk_size=C
    )
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    # fp32 cumsums lose digits when strong gates make |G| large, hence the looser bound there
    ratio = 5e-5 if gate == "strong" else 1e-5
    assert_close("o", ref, o, ratio)
    assert_close("final state", ref_S, S, ratio)


def test_chunk_algebra_is_exact_in_float64(assert_close):
    q, k, v, g, beta, S0 = make_inputs(2, 150, 2, 16, 8, "bound")
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    o, S = chunk_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    assert_close("o", ref, o, 1e-12)
    assert_close("final state", ref_S, S, 1e-12)


def test_decay_factors_are_exp_above_the_floor_and_exact_zeros_below_it() -> None:
    """Small true-decay factors become 0, never denormal (slow on x86); the rest stay exp."""
    from k3chat_model.ops.delta_rule.chunk import _decay

    x = torch.tensor([0.0, -1.0, -59.5, -60.5, -80.0, -300.0, 5.0, 85.0])
    got = _decay(x.clone())
    keep = torch.tensor([True, True, True, False, False, False, True, True])
    assert torch.equal(got[keep], x[keep].exp())
    assert torch.equal(got[~keep], torch.zeros(3))


def test_chunk_at_gate_lower_bound_over_4096_tokens_stays_finite_and_exact(assert_close):
    q, k, v, g, beta, _ = make_inputs(1, 4096, 1, 16, 16, "bound")
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, output_final_state=True)
    o, S = chunk_kda(*f32(q, k, v, g, beta), output_final_state=True)
    assert_close("o", ref, o, 1e-5)
    assert_close("final state", ref_S, S, 1e-5)


def test_chunk_keeps_bf16_inputs_bf16_out_and_fp32_state():
    q, k, v, g, beta, _ = make_inputs(1, 70, 2, 16, 16)
    o, S = chunk_kda(*(x.bfloat16() for x in (q, k, v, g, beta)), output_final_state=True)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32


@pytest.mark.parametrize("T", [1, 3, 20])
def test_fused_recurrent_matches_naive_recurrent(T, assert_close):
    q, k, v, g, beta, S0 = make_inputs(2, T, 3, 16, 8)
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    o, S = fused_recurrent_kda(
        *f32(q, k, v, g, beta), initial_state=S0.float(), output_final_state=True
    )
    assert_close("o", ref, o, 1e-6)
    assert_close("final state", ref_S, S, 1e-6)


def test_fused_recurrent_inplace_updates_the_given_state(assert_close):
    q, k, v, g, beta, S0 = make_inputs(1, 4, 2, 16, 8)
    _, ref_S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    state = S0.float().clone()
    _, S = fused_recurrent_kda(
        *f32(q, k, v, g, beta), initial_state=state, output_final_state=True, inplace=True
    )
    assert S is state
    assert_close("state", ref_S, state, 1e-6)


def test_chunked_prefill_then_decode_matches_full_run(assert_close):
    q, k, v, g, beta, _ = make_inputs(2, 120, 2, 16, 16)
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, output_final_state=True)
    q, k, v, g, beta = f32(q, k, v, g, beta)
    P = 101
    outs = []
    o, S = chunk_kda(q[:, :P], k[:, :P], v[:, :P], g[:, :P], beta[:, :P], output_final_state=True)
    outs.append(o)
    for t in range(P, q.shape[1]):
        s = slice(t, t + 1)
        o, S = fused_recurrent_kda(
            q[:, s],
            k[:, s],
            v[:, s],
            g[:, s],
            beta[:, s],
            initial_state=S,
            output_final_state=True,
            inplace=True,
        )
        outs.append(o)
    assert_close("o", ref, torch.cat(outs, dim=1), 1e-5)
    assert_close("final state", ref_S, S, 1e-5)


@pytest.mark.parametrize("T", [1, 100])
def test_kda_dispatch_gives_the_same_result_either_way(T, assert_close):
    q, k, v, g, beta, S0 = make_inputs(1, T, 2, 16, 16)
    ref, _ = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0)
    o, S = kda(*f32(q, k, v, g, beta), initial_state=S0.float())
    assert S is None
    assert_close("o", ref, o, 1e-5)


def test_non_fp32_initial_state_is_rejected_with_its_dtype():
    q, k, v, g, beta, S0 = f32(*make_inputs(1, 8, 2, 16, 16))
    for fn in (chunk_kda, fused_recurrent_kda):
        with pytest.raises(ValueError, match="initial_state must be fp32.*bfloat16"):
            fn(q, k, v, g, beta, initial_state=S0.bfloat16())


def test_wrong_shapes_and_chunk_size_are_rejected_with_expected_shape():
    q, k, v, g, beta, _ = f32(*make_inputs(1, 8, 2, 16, 16))
    with pytest.raises(ValueError, match=r"g must have shape \[1, 8, 2, 16\], got \[1, 8, 16\]"):
        chunk_kda(q, k, v, g[:, :, 0], beta)
    with pytest.raises(ValueError, match=r"beta must have shape"):
        fused_recurrent_kda(q, k, v, g, beta[..., None])
    with pytest.raises(ValueError, match="chunk_size must be"):
        chunk_kda(q, k, v, g, beta, chunk_size=48)


def test_long_prompt_split_into_segments_matches_one_pass(assert_close, monkeypatch):
    import k3chat_model.ops.delta_rule.chunk as chunk_mod

    q, k, v, g, beta, S0 = make_inputs(2, 300, 2, 16, 16)
    ref, ref_S = naive_recurrent_kda(q, k, v, g, beta, initial_state=S0, output_final_state=True)
    # 2*2*16 elements per token: a 2048-element budget gives 64-token segments
    monkeypatch.setattr(chunk_mod, "_SEGMENT_ELEMENTS", 2048)
    o, S = chunk_kda(*f32(q, k, v, g, beta), initial_state=S0.float(), output_final_state=True)
    assert_close("o", ref, o, 1e-5)
    assert_close("final state", ref_S, S, 1e-5)
