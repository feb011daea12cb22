"""Token sampling: repetition penalty, temperature, top-k, top-p (HF semantics)."""

from __future__ import annotations

import torch

from .events import SamplingParams


def apply_repetition_penalty(logits: torch.Tensor, recent: torch.Tensor, penalty: float) -> torch.Tensor:
    """Divide positive / multiply negative logits of tokens seen recently (CTRL-style, as HF)."""
    if penalty == 1.0 or recent.numel() == 0:
        return logits
    seen = torch.unique(recent)
    vals = logits[seen]
    logits = logits.clone()
    logits[seen] = torch.where(vals > 0, vals / penalty, vals * penalty)
    return logits


def sample_next(logits: torch.Tensor, params: SamplingParams, recent: torch.Tensor,
                generator: torch.Generator | None = None) -> int:
    """logits [vocab] (any float dtype) -> next token id."""
    logits = apply_repetition_penalty(logits.float(), recent, params.repetition_penalty)
    if params.temperature <= 0:
        return int(logits.argmax())
    logits = logits / params.temperature
    # candidates sorted by logit: the top-k (cheap) or, without top-k, the whole vocabulary
    k = params.top_k if params.top_k and params.top_k < logits.shape[-1] else logits.shape[-1]
    values, order = torch.topk(logits, k)
    probs = torch.softmax(values, dim=-1)
    if 0 < params.top_p < 1:
        drop = probs.cumsum(-1) - probs > params.top_p
        probs = probs.masked_fill(drop, 0)
    return int(order[torch.multinomial(probs, 1, generator=generator)])
