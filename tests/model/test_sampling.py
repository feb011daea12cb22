"""The sampler (`generation.candidates`) against a plain float64 reference of HF's rules, and a
batched prefill's last-position head against the full forward."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from k3chat_model.events import SamplingParams
from k3chat_model.generation import apply_repetition_penalty, candidates
from k3chat_model.loading import load_model


def _penalty_reference(logits: torch.Tensor, recent: torch.Tensor, penalty: float) -> torch.Tensor:
    """Element by element: each recent token's logit divided if positive, multiplied if not."""
    out = logits.clone()
    for b in range(logits.shape[0]):
        for t in set(recent[b].tolist()):
            v = logits[b, t]
            out[b, t] = v / penalty if v > 0 else v * penalty
    return out


def test_repetition_penalty_touches_only_recent_tokens_once_each() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 300, generator=g, dtype=torch.float64)
    recent = torch.randint(0, 300, (4, 40), generator=g)
    recent[:, :5] = recent[:, 5:10]  # repeated ids are penalised once, not once per repeat
    got = apply_repetition_penalty(logits, recent, 1.3)
    assert torch.equal(got, _penalty_reference(logits, recent, 1.3))
    assert torch.equal(apply_repetition_penalty(logits, recent, 1.0), logits)
    assert (got != logits).any(dim=1).all()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(temperature=1.3, top_k=0, top_p=1.0, repetition_penalty=1.5),
        SamplingParams(temperature=0.5, top_k=7, top_p=0.5, repetition_penalty=1.0),
    ],
)
def test_candidates_match_the_plain_reference(params: SamplingParams) -> None:
    g = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(3, 500, generator=g)  # the sampler works in fp32
    recent = torch.randint(0, 500, (3, 16), generator=g)
    probs, order = candidates(logits, params, recent)
    for b in range(3):
        ref = _penalty_reference(logits.double(), recent, params.repetition_penalty)[b]
        ref = ref / params.temperature
        ranked = ref.argsort(descending=True)
        if params.top_k:
            ranked = ranked[: params.top_k]
        p = torch.softmax(ref[ranked], -1)
        keep = p.cumsum(-1) - p <= params.top_p  # the smallest prefix reaching top_p
        assert torch.equal(order[b], ranked)
        torch.testing.assert_close(probs[b].double(), torch.where(keep, p, 0), rtol=1e-5, atol=1e-7)


def test_batched_prefill_head_is_the_full_forwards_last_position(tiny_checkpoints) -> None:
    """`num_logits=1` on a batch gives the full forward's last logits, through one matrix
    product: the strided last-position slice once made matmul copy the head per row (a
    batch-48 k3-smol prefill took 5-24 s instead of 20 ms)."""
    model = load_model(tiny_checkpoints["k3-tiny"], dtype=torch.float32)
    ids = torch.randint(0, 1000, (4, 9), generator=torch.Generator().manual_seed(2))
    bmm = []
    with torch.no_grad():
        for n in (None, 1):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                out = model(ids, num_logits=n).logits
            bmm.append(sum(e.count for e in prof.key_averages() if e.key == "aten::bmm"))
            if n is None:
                full = out[:, -1:]
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)
    assert bmm[1] == bmm[0], "the head ran as a batched product over per-row copies"
