"""An exponential moving average of the weights stage 2 trains (`timed --ema`).

Why: from session 27 on, CPU continuations of the 12-layer hybrid ended where they started
(topics top-1 85.0–85.2%): each snapshot is one point of a noisy walk around the same level.
An average of the weights over the last few hundred steps is, for a small-LR run near a
minimum, at least as good as its points and often better (Polyak averaging; Izmailov et al.
2018, "Averaging Weights Leads to Wider Optima"). The average is kept in fp32 on the CPU, so it
costs one copy of the trained layers and no extra forward pass until it is evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from .experts import load_routed, routed_params


class WeightEMA:
    """Shadow weights `s ← decay·s + (1 − decay)·w` of KDA layers and routed experts.

    It starts at the live weights. Non-float entries of a state dict (none today) are copied,
    not averaged.
    """

    def __init__(
        self,
        students: dict[int, nn.Module],
        experts: dict[int, nn.Module] | None = None,
        decay: float = 0.99,
    ) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must lie in (0, 1), got {decay}")
        self.decay = decay
        self.students = students
        self.experts = experts or {}
        self.updates = 0
        self.layers = {i: _fp32_copy(m.state_dict()) for i, m in students.items()}
        self.routed = {i: _fp32_copy(routed_params(m)) for i, m in self.experts.items()}

    @torch.no_grad()
    def update(self) -> None:
        """Fold the live weights in (after an optimizer step)."""
        for i, m in self.students.items():
            _fold(self.layers[i], m.state_dict(), self.decay)
        for i, m in self.experts.items():
            _fold(self.routed[i], routed_params(m), self.decay)
        self.updates += 1

    def weights(self) -> dict:
        """The average in the form `timed` snapshots weights: CPU tensors in each live dtype."""
        return {
            "layers": {i: _like(self.layers[i], m.state_dict()) for i, m in self.students.items()},
            "experts": {i: _like(self.routed[i], routed_params(m))
                        for i, m in self.experts.items()},
        }  # fmt: skip

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The average in the live modules for the block; the trained weights come back after,
        bit for bit, so training goes on from where it was."""
        live = {i: {k: v.detach().clone() for k, v in m.state_dict().items()}
                for i, m in self.students.items()}  # fmt: skip
        live_routed = {i: {k: v.detach().clone() for k, v in routed_params(m).items()}
                       for i, m in self.experts.items()}  # fmt: skip
        avg = self.weights()
        try:
            for i, m in self.students.items():
                m.load_state_dict(avg["layers"][i])
            for i, m in self.experts.items():
                load_routed(m, avg["experts"][i])
            yield
        finally:
            for i, m in self.students.items():
                m.load_state_dict(live[i])
            for i, m in self.experts.items():
                load_routed(m, live_routed[i])


def _fp32_copy(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (v.detach().to("cpu", torch.float32, copy=True) if v.is_floating_point()
                else v.detach().to("cpu", copy=True)) for k, v in tensors.items()}  # fmt: skip


def _fold(shadow: dict[str, torch.Tensor], live: dict[str, torch.Tensor], decay: float) -> None:
    for k, v in live.items():
        s = shadow[k]
        if s.is_floating_point():
            s.mul_(decay).add_(v.detach().to("cpu", torch.float32), alpha=1.0 - decay)
        else:
            s.copy_(v.detach().cpu())


def _like(shadow: dict[str, torch.Tensor], live: dict[str, torch.Tensor]) -> dict:
    # copy=True: fp32 weights would otherwise alias the shadow, and a snapshot taken at one
    # evaluation would drift with every later update
    return {k: shadow[k].to(v.dtype, copy=True) for k, v in live.items()}
