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
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if 0 < params.top_p < 1:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = cum - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return int(torch.multinomial(probs, 1, generator=generator))
