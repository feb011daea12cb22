"""Batched generation through the engine's cached forward (teacher replies and the gate).

Prompts of equal token length share a batch, so no padding or attention mask is needed. Rows
that finish are dropped from the batch (and its cache) once a quarter of it has finished: a
batch of replies of 20-160 tokens would otherwise decode all 48 rows for as long as the longest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain

import torch
from torch import nn

from ..events import SamplingParams
from ..generation import candidates
from ..layers.linear import cpu_bf16_is_slow
from ..model import K3ForCausalLM

DROP_FINISHED_AT = 0.25
"""Share of a batch that must have finished before its finished rows are dropped (each drop
copies the cache, so not one row at a time); above 1, never (benchmarks time that)."""


@contextmanager
def fp32_on_slow_cpu(model: K3ForCausalLM, *, column_major: bool = True) -> Iterator[None]:
    """`model`'s bf16 tensors held in fp32 for the duration, on a CPU without native bf16.

    Why: teacher replies decode 48 rows at a time, and on such a CPU each step's bf16 products
    take `layers.linear`'s fp32 path, converting every weight again; fp32 weights skip that
    (1.3–1.8× the replies' tok/s on a 2-core Zen 3, docs/benchmarks.md). `column_major` also
    stores each `nn.Linear` weight transposed in memory (same shape and values): torch's fp32
    product of 8–64 rows by a row-major [out, in] weight runs at half the speed of the same
    product by a column-major one (`benchmarks/small_matmul.py`). Only for training text, whose
    tokens merely differ by sampling: what is evaluated or gated runs as it ships. The bf16
    tensors are put back as they were (not a round trip), so fp32-kept ones stay untouched.
    """
    dev = model.model.embed_tokens.weight.device
    held = [
        (t, t.data) for t in chain(model.parameters(), model.buffers()) if t.dtype == torch.bfloat16
    ]
    if dev.type != "cpu" or not held or not cpu_bf16_is_slow():
        yield
        return
    linear_weights = (
        {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
        if column_major
        else set()
    )
    try:
        for t, data in held:
            t.data = _column_major(data.float()) if id(t) in linear_weights else data.float()
        yield
    finally:
        for t, data in held:
            t.data = data


def _column_major(w: torch.Tensor) -> torch.Tensor:
    """`w` with the same shape and values, its storage transposed (`w.t()` is contiguous)."""
    return w.t().contiguous().t() if w.dim() == 2 else w


@torch.no_grad()
def generate(
    model: K3ForCausalLM,
    prompts: list[list[int]],
    max_new: int,
    params: SamplingParams,
    stop_id: int,
    *,
    seed: int = 0,
    batch: int = 16,
    on_batch: Callable[[int, int], None] | None = None,
) -> list[list[int]]:
    """Replies (without the stop token) for every prompt, in prompt order.

    Sampling uses `generation.candidates` (the app's sampler, batched), one seeded generator per
    prompt, so a reply does not depend on which prompts share its batch. Runs on the model's
    device.
    """
    out: list[list[int]] = [[] for _ in prompts]
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    groups = [
        idx[j : j + batch] for _, idx in sorted(by_len.items()) for j in range(0, len(idx), batch)
    ]
    dev = model.model.embed_tokens.weight.device
    done_tokens = 0
    for group in groups:
        hist = torch.tensor([prompts[i] for i in group], dtype=torch.long, device=dev)
        gens = [torch.Generator(dev).manual_seed(seed * 1_000_003 + i) for i in group]
        rows = list(group)  # the prompt index of each batch row
        alive = [True] * len(rows)
        cache = model.make_cache()
        logits = model(hist, cache, num_logits=1).logits[:, -1]
        for _ in range(max_new):
            window = hist[:, -params.repetition_window :]
            probs, order = candidates(logits, params, window)
            if params.temperature > 0:
                pick = [torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(gens)]
                order = order.gather(1, torch.stack(pick))
            nxt = order[:, :1]
            for r, t in enumerate(nxt[:, 0].tolist()):
                if alive[r]:
                    if t == stop_id:
                        alive[r] = False
                    else:
                        out[rows[r]].append(t)
            if not any(alive):
                break
            if alive.count(False) >= max(1.0, DROP_FINISHED_AT * len(rows)):
                keep = [r for r, a in enumerate(alive) if a]
                idx = torch.tensor(keep, device=dev)
                rows, gens = [rows[r] for r in keep], [gens[r] for r in keep]
                alive = [True] * len(keep)
                hist, nxt = hist[idx], nxt[idx]
                cache.keep_rows(idx)
            hist = torch.cat([hist, nxt], dim=1)
            logits = model(nxt, cache).logits[:, -1]
        done_tokens += sum(len(out[i]) for i in group)
        if on_batch:
            on_batch(done_tokens, len(groups))
    return out
