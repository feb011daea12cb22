"""Batched generation samples exactly what the app's one-row sampler would, prompt by prompt."""

from __future__ import annotations

import copy

import pytest
import torch
from distill_helpers import VOCAB

from k3chat_model.distill.generate import fp32_on_slow_cpu, generate
from k3chat_model.events import SamplingParams
from k3chat_model.generation import sample_next


@torch.no_grad()
def _one_by_one(model, prompt: list[int], max_new: int, params, stop_id: int, gen) -> list[int]:
    """The plain reference: one prompt, full forward each step, `sample_next` on the last logits."""
    hist, out = list(prompt), []
    for _ in range(max_new):
        logits = model(torch.tensor([hist])).logits[0, -1]
        window = torch.tensor(hist[-params.repetition_window :], dtype=torch.long)
        t = sample_next(logits, params, window, gen)
        if t == stop_id:
            break
        out.append(t)
        hist.append(t)
    return out


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(),
        SamplingParams(
            temperature=1.3, top_p=1.0, top_k=0, repetition_penalty=1.5, repetition_window=4
        ),
        SamplingParams(temperature=0.0, repetition_penalty=1.0),
    ],
)
def test_batched_generation_matches_one_prompt_at_a_time(teacher, params) -> None:
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 5, 5, 7, 5)]
    stop = 2
    got = generate(teacher, prompts, 12, params, stop, seed=4, batch=3)
    for i, p in enumerate(prompts):
        gen = torch.Generator().manual_seed(4 * 1_000_003 + i)
        assert got[i] == _one_by_one(teacher, p, 12, params, stop, gen), i
    assert any(len(o) == 12 for o in got)  # the check covers full-length replies too
    if params.temperature > 0:  # and replies that stopped while others in their batch went on
        assert any(len(o) < 12 for o in got)


def _tensors(model) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def test_fp32_on_slow_cpu_generates_with_fp32_weights_and_restores_the_bf16_ones(
    teacher, bf16_mode
) -> None:
    """Where bf16 is slow, teacher replies decode with fp32 copies of the bf16 weights (linear
    weights stored column-major, the faster layout for few-row products): the same replies as
    an fp32 model of those weights; afterwards every tensor is the one it was."""
    bf16_mode("fp32")
    model = teacher.to(torch.bfloat16)
    kept = model.model.norm.weight
    kept.data = kept.data.float()  # an fp32-kept tensor (router, gates) must stay as it is
    before = [(t.dtype, t.data_ptr()) for t in _tensors(model)]
    reference = copy.deepcopy(model).float()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, VOCAB, (6,), generator=g).tolist() for _ in range(4)]
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    with fp32_on_slow_cpu(model):
        assert all(t.dtype != torch.bfloat16 for t in _tensors(model))
        assert kept.data_ptr() == before[[t is kept for t in _tensors(model)].index(True)][1]
        linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert linears and all(w.t().is_contiguous() for w in linears)  # column-major storage
        got = generate(model, prompts, 10, greedy, 2, batch=4)
    assert got == generate(reference, prompts, 10, greedy, 2, batch=4)
    assert [(t.dtype, t.data_ptr()) for t in _tensors(model)] == before


def test_fp32_on_slow_cpu_leaves_native_bf16_alone(teacher, bf16_mode) -> None:
    bf16_mode("native")
    model = teacher.to(torch.bfloat16)
    with fp32_on_slow_cpu(model):
        assert all(t.dtype == torch.bfloat16 for t in model.parameters())
