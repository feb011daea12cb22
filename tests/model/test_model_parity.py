import dataclasses

import pytest
import torch

from k3chat_model.config import K3Config
from k3chat_model.layers.attnres import attn_res
from k3chat_model.layers.mla import MLAttention
from k3chat_model.loading import load_model
from k3chat_model.model import K3ForCausalLM


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("preset", ["k3-tiny", "kimi-linear-tiny"])
def test_piecewise_decoding_matches_full_forward(tiny_checkpoints, preset):
    model = load_model(tiny_checkpoints[preset], dtype=torch.float32)
    ids = torch.randint(0, 1000, (2, 90), generator=torch.Generator().manual_seed(1))
    full = model(ids).logits
    cache = model.make_cache()
    pieces = [
        model(ids[:, :33], cache).logits,
        model(ids[:, 33:34], cache).logits,
        model(ids[:, 34:80], cache).logits,
    ]
    pieces += [model(ids[:, t : t + 1], cache).logits for t in range(80, 90)]
    assert cache.seen == 90
    err = rel(torch.cat(pieces, dim=1), full)
    assert err <= 1e-4, f"piecewise vs full: rel {err:.2e}"


@pytest.mark.parametrize("preset", ["k3-tiny", "kimi-linear-tiny"])
def test_a_cache_keeps_chosen_rows_as_if_only_they_had_run(tiny_checkpoints, preset):
    """`Cache.keep_rows` (batched generation drops finished rows): decoding on continues each
    kept row exactly as a batch of only those rows would, KDA state and attention caches alike."""
    model = load_model(tiny_checkpoints[preset], dtype=torch.float32)
    ids = torch.randint(0, 1000, (3, 20), generator=torch.Generator().manual_seed(3))
    keep = torch.tensor([2, 0])
    cache, alone = model.make_cache(), model.make_cache()
    model(ids[:, :14], cache)
    cache.keep_rows(keep)
    model(ids[keep, :14], alone)
    for t in range(14, 20):
        got, want = (
            model(ids[keep, t : t + 1], cache).logits,
            model(ids[keep, t : t + 1], alone).logits,
        )
        assert rel(got, want) <= 1e-5, t


@pytest.mark.parametrize("preset", ["k3-tiny", "kimi-linear-tiny"])
def test_logits_are_not_degenerate(tiny_checkpoints, preset):
    model = load_model(tiny_checkpoints[preset], dtype=torch.float32)
    logits = model(torch.arange(40)[None]).logits[0]
    assert torch.isfinite(logits).all()
    assert logits.std() > 0.3
    assert logits.argmax(-1).unique().numel() > 3


def test_mla_absorbed_decode_matches_naive(tiny_checkpoints):
    model = load_model(tiny_checkpoints["k3-tiny"], dtype=torch.float64)
    layer = next(la.self_attn for la in model.model.layers if isinstance(la.self_attn, MLAttention))
    x = torch.randn(2, 20, model.config.hidden_size, dtype=torch.float64)
    cache_a, cache_n = model.make_cache().layers[3], model.make_cache().layers[3]
    layer(x[:, :17], cache_a, absorb=False)
    layer(x[:, :17], cache_n, absorb=False)
    for t in range(17, 20):
        a = layer(x[:, t : t + 1], cache_a, absorb=True)
        n = layer(x[:, t : t + 1], cache_n, absorb=False)
        assert rel(a, n) < 1e-10
    # several queries at once with a causal offset
    multi_a = layer(x[:, 17:20], None, absorb=True)
    multi_n = layer(x[:, 17:20], None, absorb=False)
    assert rel(multi_a, multi_n) < 1e-10


def naive_attn_res(prefix, blocks, w_norm, w_q, eps):
    """Per-token loop in float64, straight from spec §2.3."""
    B, T, H = prefix.shape
    out = torch.empty(B, T, H, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            vs = [blk[b, t].double() for blk in blocks] + [prefix[b, t].double()]
            scores = []
            for v in vs:
                k = v / torch.sqrt((v * v).mean() + eps)
                scores.append(float((k * w_norm.double() * w_q.double()[0]).sum()))
            p = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
            out[b, t] = sum(pi * v for pi, v in zip(p, vs))
    return out


def test_attn_res_matches_float64_reference():
    g = torch.Generator().manual_seed(0)
    H = 16
    prefix = torch.randn(2, 5, H, generator=g)
    blocks = [torch.randn(2, 5, H, generator=g) * s for s in (1.0, 3.0, 0.2)]
    w_norm, w_q = torch.randn(H, generator=g), torch.randn(1, H, generator=g)
    out = attn_res(prefix, blocks, w_norm, w_q, 1e-5)
    ref = naive_attn_res(prefix, blocks, w_norm, w_q, 1e-5)
    assert rel(out, ref) < 1e-6


def test_attn_res_with_zero_queries_equals_prenorm_residual_stack(tiny_checkpoints):
    ar = load_model(tiny_checkpoints["k3-tiny"], dtype=torch.float64)
    for name, p in ar.named_parameters():
        if name.endswith("_res.proj_weight"):
            p.data.zero_()
    plain_cfg = dataclasses.replace(ar.config, attn_res_block_size=None)
    plain = K3ForCausalLM(
        plain_cfg, type(ar.model.layers[1].block_sparse_moe.experts[0].w1)
    ).double()
    state = {k: v for k, v in ar.state_dict().items() if "_res." not in k}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert not unexpected and all("_res." in m for m in missing)
    ids = torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        err = rel(ar(ids).logits, plain(ids).logits)
    assert err < 1e-4, err


def test_layer_schedule_follows_one_based_lists():
    raw = {
        "model_type": "kimi_linear",
        "hidden_size": 8,
        "num_hidden_layers": 5,
        "vocab_size": 10,
        "intermediate_size": 8,
        "num_attention_heads": 2,
        "linear_attn_config": {
            "num_heads": 2,
            "head_dim": 4,
            "kda_layers": [1, 2, 3, 5],
            "full_attn_layers": [4],
        },
    }
    assert K3Config.from_hf(raw).layer_kinds == ["kda", "kda", "kda", "mla", "kda"]
