"""`WeightEMA`: the average `timed --ema` scores and may snapshot matches the closed form, and
scoring it leaves the trained weights exactly as they were."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from k3chat_model.distill.weight_ema import WeightEMA


def _layers() -> dict[int, nn.Module]:
    torch.manual_seed(0)
    return {1: nn.Linear(4, 3), 3: nn.Linear(3, 2, bias=False)}


def test_average_matches_the_closed_form_in_float64() -> None:
    layers = _layers()
    w0 = {i: {k: v.double().clone() for k, v in m.state_dict().items()} for i, m in layers.items()}
    avg = WeightEMA(layers, decay=0.9)
    seen = []
    for step in range(5):
        with torch.no_grad():
            for m in layers.values():
                for p in m.parameters():
                    p.add_(torch.randn_like(p) * (step + 1))
        seen.append({i: {k: v.double().clone() for k, v in m.state_dict().items()}
                     for i, m in layers.items()})  # fmt: skip
        avg.update()
    got = avg.weights()["layers"]
    for i in layers:
        for k in w0[i]:
            ref = w0[i][k] * 0.9**5 + sum(
                0.1 * 0.9 ** (4 - t) * s[i][k] for t, s in enumerate(seen)
            )
            err = (got[i][k].double() - ref).norm() / ref.norm()
            assert err < 1e-6, (i, k, err)
            assert not torch.allclose(got[i][k], layers[i].state_dict()[k])  # not the live one


def test_applied_scores_the_average_and_restores_the_live_weights() -> None:
    layers = _layers()
    avg = WeightEMA(layers, decay=0.5)
    start = {i: {k: v.clone() for k, v in m.state_dict().items()} for i, m in layers.items()}
    with torch.no_grad():
        for m in layers.values():
            for p in m.parameters():
                p.add_(1.0)
    avg.update()
    live = {i: {k: v.clone() for k, v in m.state_dict().items()} for i, m in layers.items()}
    x = torch.randn(2, 4)
    with avg.applied():
        for k, v in layers[1].state_dict().items():
            assert torch.allclose(v, start[1][k] + 0.5)
        out = layers[1](x)
    assert torch.allclose(out, x @ (start[1]["weight"] + 0.5).T + start[1]["bias"] + 0.5)
    for i, m in layers.items():
        for k, v in m.state_dict().items():
            assert torch.equal(v, live[i][k])


def test_a_taken_average_does_not_move_with_later_updates() -> None:
    layers = _layers()
    avg = WeightEMA(layers, decay=0.5)
    taken = avg.weights()
    kept = {i: {k: v.clone() for k, v in w.items()} for i, w in taken["layers"].items()}
    with torch.no_grad():
        for m in layers.values():
            for p in m.parameters():
                p.add_(3.0)
    avg.update()
    for i, w in taken["layers"].items():
        for k, v in w.items():
            assert torch.equal(v, kept[i][k])


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_the_open_interval_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match="decay"):
        WeightEMA(_layers(), decay=decay)
