"""The fp32 path for many-row bf16 products on CPUs without native bf16 (`layers/linear.py`).

Both paths run on any machine (the mode is forced), so CI checks them whatever its CPU.
"""

from __future__ import annotations

import platform

import torch
import torch.nn.functional as F

from k3chat_model.layers import linear as lin
from k3chat_model.layers.linear import FP32_MIN_ROWS, MODE_ENV, Linear, cpu_bf16_is_slow, linear
from k3chat_model.loading import load_model


def _operands(rows: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, rows, 96, generator=g).bfloat16()
    w = (torch.randn(80, 96, generator=g) / 10).bfloat16()
    b = torch.randn(80, generator=g).bfloat16()
    return x, w, b


def test_the_mode_variable_overrides_detection(bf16_mode):
    bf16_mode("fp32")
    assert cpu_bf16_is_slow()
    bf16_mode("native")
    assert not cpu_bf16_is_slow()


def test_an_unknown_mode_is_reported_once_and_detection_used(bf16_mode, monkeypatch, capsys):
    bf16_mode(None)
    detected = cpu_bf16_is_slow()
    bf16_mode("fast")
    assert cpu_bf16_is_slow() == detected
    assert cpu_bf16_is_slow() == detected
    assert capsys.readouterr().err.count(f"ignoring {MODE_ENV}='fast'") == 1


def test_detection_follows_the_cpu_features(bf16_mode):
    bf16_mode(None)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        assert not cpu_bf16_is_slow()
        return
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert cpu_bf16_is_slow() == (not native)


def test_many_rows_take_the_fp32_path_and_round_back_to_bf16(bf16_mode):
    bf16_mode("fp32")
    x, w, b = _operands(FP32_MIN_ROWS)
    out = linear(x, w, b)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, F.linear(x.float(), w.float(), b.float()).bfloat16())


def test_a_large_weight_is_converted_block_by_block_with_the_same_result(bf16_mode, monkeypatch):
    bf16_mode("fp32")
    x, w, b = _operands(FP32_MIN_ROWS)
    whole = linear(x, w, b)
    monkeypatch.setattr(lin, "FP32_BLOCK_BYTES", 4 * w.shape[1] * 7)  # 7 rows a block: 12 blocks
    x.requires_grad_(True)
    blocked = linear(x, w, b)
    assert torch.equal(blocked, whole)
    blocked.float().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()


def test_decode_sized_products_and_native_cpus_keep_bf16(bf16_mode):
    bf16_mode("fp32")
    x, w, b = _operands(FP32_MIN_ROWS // 2 - 1)  # 2 × 7 rows < FP32_MIN_ROWS
    assert torch.equal(linear(x, w, b), F.linear(x, w, b))
    bf16_mode("native")
    x, w, b = _operands(64)
    assert torch.equal(linear(x, w, b), F.linear(x, w, b))


def test_fp32_path_is_as_close_to_float64_as_the_bf16_kernel(bf16_mode):
    x, w, b = _operands(64, seed=3)
    ref = F.linear(x.double(), w.double(), b.double())

    def rel(out: torch.Tensor) -> float:
        return float((out.double() - ref).norm() / ref.norm())

    bf16_mode("native")
    native = rel(linear(x, w, b))
    bf16_mode("fp32")
    fast = rel(linear(x, w, b))
    assert fast <= native * 1.05 + 1e-6
    assert fast < 5e-3  # bf16 output rounding only


def test_fp32_operands_are_left_to_torch(bf16_mode, monkeypatch):
    bf16_mode("fp32")
    calls = []
    real = F.linear
    monkeypatch.setattr(lin.F, "linear", lambda *a: calls.append(a[0].dtype) or real(*a))
    x, w, _ = _operands(64)
    linear(x.float(), w.float())
    assert calls == [torch.float32]


def test_bf16_autocast_takes_the_fp32_path_with_autocasts_output_dtype(bf16_mode):
    """Stage 2 of distillation trains under bf16 autocast: fp32 masters, bf16 results."""
    x, w, _ = _operands(64)
    x, w = x.float().requires_grad_(True), w.float().requires_grad_(True)
    bf16_mode("native")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        native = linear(x, w)
    bf16_mode("fp32")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = linear(x, w)
    assert fast.dtype == native.dtype == torch.bfloat16
    assert torch.equal(fast, F.linear(x.detach(), w.detach()).bfloat16())
    ref = F.linear(x.double(), w.double())
    assert (fast.double() - ref).norm() <= (native.double() - ref).norm() * 1.05
    fast.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32


def test_gradients_flow_through_the_fp32_path(bf16_mode):
    bf16_mode("fp32")
    layer = Linear(96, 80).bfloat16()
    x, _, _ = _operands(32)
    x.requires_grad_(True)
    layer(x).float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.bfloat16
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()


def test_a_bf16_model_prefills_the_same_logits_on_either_path(tiny_checkpoints, bf16_mode):
    """End to end on a tiny K3 (KDA, MLA, MoE, AttnRes): both paths agree with each other as
    closely as with a float64 reference, and greedy picks match."""
    path = tiny_checkpoints["k3-tiny"]
    model = load_model(path, dtype=torch.bfloat16).eval()
    ref_model = load_model(path, dtype=torch.float64).eval()
    ids = torch.randint(
        5, model.config.vocab_size, (1, 48), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        ref = ref_model(ids).logits
        bf16_mode("native")
        native = model(ids).logits.double()
        bf16_mode("fp32")
        fast = model(ids).logits.double()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is Linear for m in linears)  # every projection

    def rel(a: torch.Tensor) -> float:
        return float((a - ref).norm() / ref.norm())

    assert rel(fast) <= rel(native) * 1.05 + 1e-4  # bf16 rounding elsewhere dominates both
    agree = (fast.argmax(-1) == native.argmax(-1)).float().mean()
    assert agree >= 0.95
