"""KL(teacher‖student) and top-1 agreement on held-out rows, and single-swap layer ranking."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from torch import nn

from ..model import K3ForCausalLM


def inference_copy(mod: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A no-grad copy whose Linear weights are `dtype` (fp32 gate/conv/norm params stay fp32,
    as the loader keeps them)."""
    c = copy.deepcopy(mod).requires_grad_(False)
    for m in c.modules():
        if isinstance(m, nn.Linear):
            m.weight.data = m.weight.data.to(dtype)
    return c.eval()


def kl_top1(
    t_logits: torch.Tensor, s_logits: torch.Tensor, mask: torch.Tensor
) -> tuple[float, float, int]:
    """Sum of per-token KL(t‖s), count of argmax agreements, and the number of positions in `mask`."""
    m = mask.bool()
    t = t_logits.float()[m].log_softmax(-1)
    s = s_logits.float()[m].log_softmax(-1)
    kl = (t.exp() * (t - s)).sum(-1)
    agree = (t.argmax(-1) == s.argmax(-1)).sum()
    return float(kl.sum()), float(agree), int(m.sum())


def bootstrap_ci(
    num: list[float], den: list[float], n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of sum(num)/sum(den), resampling whole sequences.

    Why: tokens of one sequence are correlated, so a per-token binomial interval would be too
    narrow; held-out sets of a few thousand tokens leave about ±1 point on top-1.
    """
    if len(num) < 2:
        r = sum(num) / max(sum(den), 1)
        return r, r
    g = torch.Generator().manual_seed(seed)
    a, b = torch.tensor(num, dtype=torch.float64), torch.tensor(den, dtype=torch.float64)
    idx = torch.randint(len(num), (n_boot, len(num)), generator=g)
    ratios = a[idx].sum(1) / b[idx].sum(1).clamp_min(1)
    lo, hi = torch.quantile(ratios, torch.tensor([0.025, 0.975], dtype=torch.float64))
    return float(lo), float(hi)


@torch.no_grad()
def compare(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    rows: torch.Tensor,
    mask: torch.Tensor,
    batch: int = 2,
    teacher_logits: list[torch.Tensor] | None = None,
) -> dict[str, float]:
    """Mean KL per token and top-1 agreement over positions predicting masked tokens.

    `teacher_logits` (one entry per batch) skips the teacher forward when already known.
    """
    kl = agree = n = 0.0
    for j, i in enumerate(range(0, len(rows), batch)):
        ids = rows[i : i + batch].long()
        pm = mask[i : i + batch, 1:]  # logits at t predict token t+1
        t = teacher_logits[j] if teacher_logits is not None else teacher(ids).logits
        s = student(ids).logits
        a, b, c = kl_top1(t[:, :-1], s[:, :-1], pm)
        kl, agree, n = kl + a, agree + b, n + c
    return {"kl": kl / max(n, 1), "top1": agree / max(n, 1), "tokens": int(n)}


@torch.no_grad()
def teacher_logits(
    teacher: K3ForCausalLM, rows: torch.Tensor, batch: int = 2
) -> list[torch.Tensor]:
    return [
        teacher(rows[i : i + batch].long()).logits.to(torch.bfloat16)
        for i in range(0, len(rows), batch)
    ]


class HeadLogits:
    """A teacher's logits per sequence, made on demand from its final hidden states.

    Why: a `timed` evaluation scores ~50k positions; their logits over a 49k vocabulary would
    take gigabytes to keep, and re-running the teacher on topics cost 40 s of a 166 s CPU
    evaluation (the head alone over every set: 8 s). The hidden states take 61 MB; the
    logits are bitwise those of `teacher(ids).logits` (same head, same shapes).
    """

    def __init__(self, teacher: K3ForCausalLM, seqs: list[list[int]]) -> None:
        dev = teacher.model.embed_tokens.weight.device
        self.head = teacher.lm_head
        with torch.no_grad():
            self.hidden = [teacher.model(torch.tensor([ids], device=dev)) for ids in seqs]

    def __len__(self) -> int:
        return len(self.hidden)

    def __getitem__(self, j: int) -> torch.Tensor:
        with torch.no_grad():
            return self.head(self.hidden[j])


@contextmanager
def swapped(model: K3ForCausalLM, layers: dict[int, nn.Module], dtype: torch.dtype):
    """`model` with the token mixers of `layers` replaced by inference copies, restored on exit."""
    keep = {i: model.model.layers[i].self_attn for i in layers}
    try:
        for i, mod in layers.items():
            model.model.layers[i].self_attn = inference_copy(mod, dtype)
        yield model
    finally:
        for i, mod in keep.items():
            model.model.layers[i].self_attn = mod


@torch.no_grad()
def single_swap_kl(
    teacher: K3ForCausalLM,
    layers: dict[int, nn.Module],
    rows: torch.Tensor,
    mask: torch.Tensor,
    context: dict[int, nn.Module] | None = None,
    ref: list[torch.Tensor] | None = None,
) -> dict[int, float]:
    """KL to the teacher with exactly one layer swapped for its KDA student, per layer.

    With `context` (KDA layers already in the hybrid, e.g. a seeded shipped delta), each layer is
    measured added to them: the KL of the hybrid it would join. Why: a growing run ships that
    hybrid, and a layer's cost there differs from its cost alone (on the shipped 10-layer seed,
    layer 23 ranked 13th of 17 alone but cost the most assistant top-1 in context). `ref`: the
    teacher's logits on `rows` (`teacher_logits`), when already known.
    """
    ref = ref if ref is not None else teacher_logits(teacher, rows)
    dtype = teacher.model.embed_tokens.weight.dtype
    out = {}
    with swapped(teacher, context or {}, dtype):
        for i, mod in sorted(layers.items()):
            with swapped(teacher, {i: mod}, dtype):
                out[i] = compare(teacher, teacher, rows, mask, teacher_logits=ref)["kl"]
    return out


@torch.no_grad()
def hybrid_kl(
    teacher: K3ForCausalLM,
    layers: dict[int, nn.Module],
    rows: torch.Tensor,
    mask: torch.Tensor,
    ref: list[torch.Tensor] | None = None,
) -> float:
    """KL to the teacher of the hybrid with all of `layers` swapped in."""
    ref = ref if ref is not None else teacher_logits(teacher, rows)
    with swapped(teacher, layers, teacher.model.embed_tokens.weight.dtype):
        return compare(teacher, teacher, rows, mask, teacher_logits=ref)["kl"]
