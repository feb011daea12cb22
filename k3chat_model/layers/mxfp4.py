"""A linear layer that keeps MXFP4 weights packed (spec §3 "MXFP4 decoding").

K3's routed experts ship as compressed-tensors `mxfp4-pack-quantized`: `weight_packed` U8
[out, in/2] and `weight_scale` U8 [out, in/32]. Keeping them packed holds experts at ~4.25 bits
per weight; each call dequantises to the activation dtype (exact: E2M1 × 2^k fits bf16).
"""

from __future__ import annotations

import torch
from torch import nn

from .linear import linear


class MXFP4Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        if bias:
            raise ValueError("MXFP4 experts have no bias")
        if in_features % 32:
            raise ValueError(
                f"in_features={in_features} must be a multiple of the MXFP4 group size 32"
            )
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer(
            "weight_packed", torch.zeros(out_features, in_features // 2, dtype=torch.uint8)
        )
        self.register_buffer(
            "weight_scale", torch.zeros(out_features, in_features // 32, dtype=torch.uint8)
        )

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        from ..ops.mxfp4 import dequant_mxfp4

        return dequant_mxfp4(self.weight_packed, self.weight_scale, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.dequantized(x.dtype))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, format=mxfp4"
