"""`fused_kd_loss` (stage 2's loss with a hand-written gradient) against the plain `kd_loss`
in float64: same losses, same gradient with respect to the student's logits."""

from __future__ import annotations

import shutil

import pytest
import torch

from k3chat_model.distill import fused_loss
from k3chat_model.distill.fused_loss import fused_head_kd_loss, fused_kd_loss
from k3chat_model.distill.stage2 import kd_loss


def _inputs(dtype: torch.dtype = torch.float32, seed: int = 0):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    t = (3 * torch.randn(2, 9, 64, generator=g)).to(dtype)
    s = (3 * torch.randn(2, 9, 64, generator=g)).to(dtype)
    s[0, 3] = t[0, 3]  # a position where student and teacher agree exactly (TVD's kink)
    mask = torch.ones(2, 9)
    mask[1, :4] = 0  # a prompt: positions whose next token is unmasked only
    return t, s, mask


def _reference(t, s, mask, top1: float, tvd: float):  # noqa: ANN001, ANN202
    s64 = s.double().requires_grad_(True)
    kl, ce, tv = kd_loss(t.double(), s64, mask)
    loss = kl + top1 * ce + tvd * tv
    loss.backward()
    return loss.detach(), kl.detach(), ce.detach(), tv.detach(), s64.grad


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("top1, tvd", [(0.0, 0.0), (0.5, 0.0), (0.0, 1.0), (0.5, 1.0)])
def test_losses_and_gradient_match_the_float64_reference(top1: float, tvd: float) -> None:
    t, s, mask = _inputs()
    want = _reference(t, s, mask, top1, tvd)

    s_leaf = s.clone().requires_grad_(True)
    loss, kl, ce, tv = fused_kd_loss(t, s_leaf, mask, top1, tvd)
    (3.0 * loss).backward()  # the upstream gradient scales it

    for got, ref in zip((loss, kl, ce, tv), want[:4], strict=True):
        assert abs(got.item() - ref.item()) <= 1e-5 * abs(ref.item()) + 1e-7
    assert _rel(s_leaf.grad, 3.0 * want[4]) < 1e-5
    assert torch.all(s_leaf.grad[1, :3] == 0) and torch.all(s_leaf.grad[:, -1] == 0)
    assert not kl.requires_grad and not ce.requires_grad and not tv.requires_grad


def test_bf16_logits_get_a_bf16_gradient_close_to_the_reference() -> None:
    t, s, mask = _inputs(torch.bfloat16, seed=1)
    want = _reference(t, s, mask, 0.5, 1.0)
    s_leaf = s.clone().requires_grad_(True)
    loss, *_ = fused_kd_loss(t, s_leaf, mask, 0.5, 1.0)
    loss.backward()
    assert s_leaf.grad.dtype == torch.bfloat16
    assert abs(float(loss) - float(want[0])) < 1e-5 * float(want[0])
    assert _rel(s_leaf.grad, want[4]) < 1e-2  # bf16 rounding of the gradient itself


def test_a_batch_with_no_scored_position_gives_zero_loss_and_gradient() -> None:
    t, s, _ = _inputs()
    s_leaf = s.clone().requires_grad_(True)
    loss, *_ = fused_kd_loss(t, s_leaf, torch.zeros(2, 9), 0.5, 1.0)
    loss.backward()
    assert float(loss) == 0.0 and torch.all(s_leaf.grad == 0)


def _hidden(dtype: torch.dtype = torch.float64, seed: int = 2):  # noqa: ANN202
    g = torch.Generator().manual_seed(seed)
    t_h, s_h = (torch.randn(2, 9, 16, generator=g) for _ in range(2))
    head = torch.randn(64, 16, generator=g)
    t_head = head + 0.1 * torch.randn(64, 16, generator=g)  # the heads need not be one tensor
    mask = torch.ones(2, 9)
    mask[1, :4] = 0
    return t_h.to(dtype), s_h.to(dtype), mask, t_head.to(dtype), head.to(dtype)


@pytest.mark.parametrize("rows", [1, 4, 100])
@pytest.mark.parametrize("top1, tvd", [(0.0, 0.0), (0.5, 1.0)])
def test_the_head_fused_loss_matches_the_reference_on_the_logits(
    rows: int, top1: float, tvd: float
) -> None:
    t_h, s_h, mask, t_head, s_head = _hidden()
    s_ref = s_h.clone().requires_grad_(True)
    kl, ce, tv = kd_loss(t_h @ t_head.t(), s_ref @ s_head.t(), mask)
    want = kl + top1 * ce + tvd * tv
    want.backward()

    s_leaf = s_h.clone().requires_grad_(True)
    got = fused_head_kd_loss(t_h, s_leaf, mask, t_head, s_head, top1, tvd, rows=rows)
    (2.0 * got[0]).backward()

    for a, b in zip(got, (want, kl, ce, tv), strict=True):
        assert abs(a.item() - b.item()) <= 1e-6 * abs(b.item()) + 1e-9
    assert _rel(s_leaf.grad, 2.0 * s_ref.grad) < 1e-6
    assert torch.all(s_leaf.grad[1, :3] == 0) and torch.all(s_leaf.grad[:, -1] == 0)


@pytest.mark.parametrize("bf16_mode", ["native", "fp32"])
def test_the_head_fused_loss_in_bf16_agrees_with_the_logit_fused_loss(
    bf16_mode, monkeypatch
) -> None:
    """Stage 2's case: bf16 hidden states and heads; the logits it never holds are the ones
    `fused_kd_loss` would get, so loss and gradient agree to bf16 rounding, also where the
    products run in fp32 (CPUs without native bf16, `layers/linear.py`)."""
    monkeypatch.setattr(fused_loss, "cpu_bf16_is_slow", lambda: bf16_mode == "fp32")
    t_h, s_h, mask, t_head, s_head = _hidden(torch.bfloat16)
    s_a = s_h.clone().requires_grad_(True)
    want = fused_kd_loss(t_h @ t_head.t(), s_a @ s_head.t(), mask, 0.5, 1.0)
    want[0].backward()
    s_b = s_h.clone().requires_grad_(True)
    got = fused_head_kd_loss(t_h, s_b, mask, t_head, s_head, 0.5, 1.0, rows=5)
    got[0].backward()
    assert s_b.grad.dtype == torch.bfloat16
    for a, b in zip(got, want, strict=True):
        assert abs(a.item() - b.item()) <= 1e-5 * abs(b.item())
    assert _rel(s_b.grad, s_a.grad.double()) < 1e-2


def test_the_head_fused_loss_refuses_a_head_that_trains_and_scores_an_empty_mask_as_zero() -> None:
    t_h, s_h, mask, t_head, s_head = _hidden(torch.float32)
    with pytest.raises(ValueError, match="frozen"):
        fused_head_kd_loss(t_h, s_h, mask, t_head, s_head.requires_grad_(True))
    s_leaf = s_h.clone().requires_grad_(True)
    loss, *_ = fused_head_kd_loss(t_h, s_leaf, torch.zeros(2, 9), t_head, s_head.detach(), 0.5, 1.0)
    loss.backward()
    assert float(loss) == 0.0 and torch.all(s_leaf.grad == 0)


def _has_cxx() -> bool:
    return any(shutil.which(c) for c in ("c++", "g++", "clang++"))


@pytest.mark.skipif(not _has_cxx(), reason="Inductor needs a C++ compiler")
def test_the_compiled_chunks_give_the_eager_loss_and_gradient(monkeypatch) -> None:
    monkeypatch.setattr(fused_loss, "COMPILE_MIN_VOCAB", 0)
    monkeypatch.setattr(fused_loss, "COMPILED_ROWS", fused_loss._CompiledRows())
    t_h, s_h, mask, t_head, s_head = _hidden(torch.float32)
    out = {}
    for compiled in (False, True):
        s_leaf = s_h.clone().requires_grad_(True)
        loss, *parts = fused_head_kd_loss(
            t_h, s_leaf, mask, t_head, s_head, 0.5, 1.0, rows=4, compiled=compiled
        )
        loss.backward()
        out[compiled] = (loss.detach(), *parts, s_leaf.grad)
    assert fused_loss.COMPILED_ROWS.fn is not None and not fused_loss.COMPILED_ROWS.failed
    for a, b in zip(out[True], out[False], strict=True):
        assert _rel(a, b.double()) < 1e-5


def test_a_compiler_failure_falls_back_to_eager_once_with_a_message(monkeypatch, capsys) -> None:
    def no_compiler(fn, **_kw):  # noqa: ANN001, ANN202
        def fail(*_a):  # noqa: ANN002, ANN202
            raise RuntimeError("no working C++ compiler found\ndetails")

        return fail

    monkeypatch.setattr(torch, "compile", no_compiler)
    monkeypatch.setattr(fused_loss, "COMPILE_MIN_VOCAB", 0)
    monkeypatch.setattr(fused_loss, "COMPILED_ROWS", fused_loss._CompiledRows())
    t_h, s_h, mask, t_head, s_head = _hidden(torch.float32)
    want = fused_head_kd_loss(t_h, s_h, mask, t_head, s_head, 0.5, 1.0, rows=4)
    for _ in range(2):
        got = fused_head_kd_loss(t_h, s_h, mask, t_head, s_head, 0.5, 1.0, rows=4, compiled=True)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    err = capsys.readouterr().err
    assert (
        err.count("compiled stage-2 loss unavailable") == 1
        and "no working C++ compiler found)" in err
    )
