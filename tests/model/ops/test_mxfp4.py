from __future__ import annotations

import pytest
import torch

from k3chat_model.errors import CheckpointError
from k3chat_model.ops.mxfp4 import E2M1_VALUES, dequant_mxfp4, naive_dequant_mxfp4, quant_mxfp4


def test_worked_example_bytes_decode_low_nibble_first():
    packed = torch.zeros(1, 16, dtype=torch.uint8)
    packed[0, :2] = torch.tensor([0x01, 0x29], dtype=torch.uint8)
    scale = torch.tensor([[127]], dtype=torch.uint8)
    out = dequant_mxfp4(packed, scale, torch.float32)
    assert out.shape == (1, 32)
    assert out[0, :4].tolist() == [0.5, 0.0, -0.5, 1.0]
    assert out[0, 4:].abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_fast_dequant_equals_naive_on_random_bytes(dtype):
    gen = torch.Generator().manual_seed(0)
    packed = torch.randint(0, 256, (5, 48), generator=gen, dtype=torch.uint8)
    # keep fp16 inside its range; bf16/fp32 take the full E8M0 range but 255 (NaN by spec)
    hi = 140 if dtype == torch.float16 else 255
    lo = 110 if dtype == torch.float16 else 0
    scale = torch.randint(lo, hi, (5, 3), generator=gen, dtype=torch.uint8)
    fast = dequant_mxfp4(packed, scale, dtype)
    ref = naive_dequant_mxfp4(packed, scale, dtype)
    assert fast.dtype == dtype
    assert torch.equal(fast, ref)


def test_quant_then_dequant_is_exact_for_representable_values():
    gen = torch.Generator().manual_seed(1)
    values = torch.tensor(E2M1_VALUES)
    codes = torch.randint(0, 16, (6, 96), generator=gen)
    # each 32-column group holds a 6 or -6 so its scale is pinned, times its own power of two
    codes[:, ::32] = torch.tensor([7, 15]).repeat(3)[:6, None]
    pow2 = torch.exp2(torch.randint(-20, 20, (6, 3), generator=gen).float())
    w = (values[codes].view(6, 3, 32) * pow2[..., None]).view(6, 96)
    packed, scale = quant_mxfp4(w)
    assert packed.shape == (6, 48) and scale.shape == (6, 3)
    assert torch.equal(dequant_mxfp4(packed, scale, torch.float32), w)


def test_quant_rounds_to_nearest_grid_value():
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    packed, scale = quant_mxfp4(w)
    deq = dequant_mxfp4(packed, scale, torch.float32)
    step = torch.exp2(scale.float() - 127).repeat_interleave(32, dim=1)
    grid = torch.tensor(E2M1_VALUES)
    candidates = (grid * step.unsqueeze(-1)).clamp(-6 * step.unsqueeze(-1), 6 * step.unsqueeze(-1))
    best = (w.unsqueeze(-1) - candidates).abs().amin(-1)
    assert torch.equal((w - deq).abs(), best)


def test_mismatched_scale_shape_raises_checkpoint_error():
    packed = torch.zeros(4, 32, dtype=torch.uint8)
    with pytest.raises(CheckpointError, match=r"needs weight_scale \[4, 2\].*got \[4, 3\]"):
        dequant_mxfp4(packed, torch.zeros(4, 3, dtype=torch.uint8))
    with pytest.raises(CheckpointError, match="must be uint8"):
        dequant_mxfp4(packed, torch.zeros(4, 2, dtype=torch.float32))
