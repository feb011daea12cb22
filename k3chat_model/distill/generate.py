"""Batched generation through the engine's cached forward (teacher replies and the gate).

Prompts of equal token length share a batch, so no padding or attention mask is needed; rows
that finish keep decoding (their tokens are discarded) until the batch is done.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..events import SamplingParams
from ..generation import sample_next
from ..model import K3ForCausalLM


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

    Sampling uses `generation.sample_next` (the app's sampler), one seeded generator per prompt,
    so a reply does not depend on which prompts share its batch.
    """
    out: list[list[int]] = [[] for _ in prompts]
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    groups = [
        idx[j : j + batch] for _, idx in sorted(by_len.items()) for j in range(0, len(idx), batch)
    ]
    done_tokens = 0
    for group in groups:
        ids = torch.tensor([prompts[i] for i in group], dtype=torch.long)
        gens = [torch.Generator().manual_seed(seed * 1_000_003 + i) for i in group]
        hist = [list(prompts[i]) for i in group]
        alive = [True] * len(group)
        cache = model.make_cache()
        logits = model(ids, cache, num_logits=1).logits[:, -1]
        for _ in range(max_new):
            nxt = []
            for r in range(len(group)):
                window = torch.tensor(hist[r][-params.repetition_window :], dtype=torch.long)
                t = sample_next(logits[r], params, window, gens[r])
                nxt.append(t)
                if alive[r]:
                    if t == stop_id:
                        alive[r] = False
                    else:
                        out[group[r]].append(t)
                        hist[r].append(t)
            if not any(alive):
                break
            logits = model(torch.tensor(nxt, dtype=torch.long)[:, None], cache).logits[:, -1]
        done_tokens += sum(len(out[i]) for i in group)
        if on_batch:
            on_batch(done_tokens, len(groups))
    return out
