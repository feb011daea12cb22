"""MXFP4 weights (compressed-tensors `mxfp4-pack-quantized`, research/k3-architecture.md §3).

Two FP4 E2M1 codes per byte, element 2j in the low nibble and 2j+1 in the high one; bit 3 of a
code is the sign and codes 0..7 mean {0, .5, 1, 1.5, 2, 3, 4, 6}. Each run of 32 columns shares
one E8M0 scale byte s meaning 2^(s - 127). Decoding to bf16 is exact (a 2-bit mantissa times a
power of two), so `dequant_mxfp4` computes straight in bf16 when asked for it.
"""

from __future__ import annotations

import torch

from k3chat_model.errors import CheckpointError

GROUP = 32
E2M1_VALUES = (
    0.0,
    0.5,
    1.0,
    1.5,
    2.0,
    3.0,
    4.0,
    6.0,
    -0.0,
    -0.5,
    -1.0,
    -1.5,
    -2.0,
    -3.0,
    -4.0,
    -6.0,
)
# exact in every float dtype, so the table can be built in the output dtype
_EXACT_DTYPES = (torch.bfloat16, torch.float32, torch.float64)


def _check(packed: torch.Tensor, scale: torch.Tensor) -> tuple[int, int]:
    """Return (out, in) or raise CheckpointError naming the mismatch."""
    if packed.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise CheckpointError(
            f"MXFP4 tensors must be uint8, got weight_packed {packed.dtype}, weight_scale {scale.dtype}"
        )
    if packed.dim() != 2 or scale.dim() != 2:
        raise CheckpointError(
            f"MXFP4 tensors must be 2-D, got weight_packed {list(packed.shape)}, "
            f"weight_scale {list(scale.shape)}"
        )
    out, cols = packed.shape[0], packed.shape[1] * 2
    if scale.shape[0] != out or scale.shape[1] * GROUP != cols:
        raise CheckpointError(
            f"MXFP4 weight_packed {list(packed.shape)} needs weight_scale [{out}, {cols // GROUP}] "
            f"(one byte per {GROUP} columns), got {list(scale.shape)}"
        )
    return out, cols


def dequant_mxfp4(
    packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Unpack MXFP4 `packed` uint8 `[out, in/2]` with `scale` uint8 `[out, in/32]` to `[out, in]`.

    Raises:
        CheckpointError: dtypes are not uint8 or the two shapes do not belong together.
    """
    out, cols = _check(packed, scale)
    work = dtype if dtype in _EXACT_DTYPES else torch.float32
    table = torch.tensor(E2M1_VALUES, dtype=work, device=packed.device)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1)  # [out, in/2, 2]
    vals = table[codes.long()].view(out, cols // GROUP, GROUP)  # [out, in/32, 32]
    pow2 = torch.exp2(scale.to(torch.float32) - 127.0).to(work)  # [out, in/32]
    return (vals * pow2.unsqueeze(-1)).view(out, cols).to(dtype)


def naive_dequant_mxfp4(
    packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """Byte-by-byte Python reference for `dequant_mxfp4`, written straight from the format."""
    out, cols = _check(packed, scale)
    mags = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    rows = []
    for o in range(out):
        row = []
        for j in range(cols // 2):
            byte = int(packed[o, j])
            for code in (byte & 0xF, byte >> 4):
                value = -mags[code & 7] if code & 8 else mags[code & 7]
                col = len(row)
                row.append(value * 2.0 ** (int(scale[o, col // GROUP]) - 127))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64).reshape(out, cols).to(dtype)


def quant_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise `w` `[out, in]` (in a multiple of 32) to MXFP4 `(packed, scale)`.

    The shared scale is the OCP MX choice 2^(floor(log2 amax) - 2), so the group's largest value
    lands in [4, 8) before clamping to 6; elements round to the nearest E2M1 value, ties to even.
    Used to write test checkpoints, so it favours clarity over speed.
    """
    if w.dim() != 2 or w.shape[1] % GROUP:
        raise CheckpointError(
            f"quant_mxfp4 needs [out, in] with in % {GROUP} == 0, got {list(w.shape)}"
        )
    out, cols = w.shape
    x = w.detach().to(torch.float64).view(out, cols // GROUP, GROUP)
    amax = x.abs().amax(-1)  # [out, in/32]
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp(min=1e-300))) - 2, 0.0)
    exp = exp.clamp(-127, 127)
    y = (x / torch.exp2(exp).unsqueeze(-1)).abs().clamp(max=6.0)  # [out, in/32, 32]
    grid = torch.tensor(E2M1_VALUES[:8], dtype=torch.float64)
    mids = (grid[1:] + grid[:-1]) / 2
    code = torch.bucketize(y, mids)  # ties go to the lower code here
    tie = (code < 7) & (y == mids[code.clamp(max=6)])
    code = torch.where(tie & (code % 2 == 1), code + 1, code)
    code = code + 8 * ((x < 0) & (code > 0)).long()
    code = code.view(out, cols // 2, 2).to(torch.uint8)
    packed = code[..., 0] | (code[..., 1] << 4)
    return packed, (exp + 127).to(torch.uint8)
