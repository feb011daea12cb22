"""bitsandbytes quantization of a built `K3ForCausalLM`, by predicate (the model file never changes).

Projections of attention, MLPs and routed/shared experts become `Linear4bit` (nf4/fp4) or
`Linear8bitLt` (int8). Kept out, by default: embeddings and lm_head, every norm, the AttnRes
pseudo-queries, the KDA gate/beta projections and parameters, MLA's `kv_b_proj` (absorbed at
decode), and the MoE router — which is stored in fp16 and computed in fp32, because routing
decisions flip under 4-bit noise. MXFP4 experts stay packed (already 4-bit).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from .layers.linear import Linear, cpu_bf16_is_slow
from .loading import keep_high_precision

QUANT_TYPES = ("nf4", "fp4", "int8")
DEFAULT_SKIP = (
    r"lm_head$",
    r"embed_tokens$",
    r"self_attn\.(f_a_proj|f_b_proj|b_proj|kv_b_proj)$",
)


@dataclass
class QuantReport:
    method: str
    quantized: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    router_fp16: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.method}: {len(self.quantized)} linear layers quantized, {len(self.skipped)} kept "
            f"(skip list), {len(self.router_fp16)} routers in fp16 storage / fp32 compute"
        )


def quantize_model(
    model: nn.Module,
    method: str,
    *,
    skip: tuple[str, ...] = DEFAULT_SKIP,
    compute_dtype: torch.dtype | None = None,
) -> QuantReport:
    """Swap eligible `nn.Linear`s in place; returns what was quantized and what was kept.

    `compute_dtype` (4-bit only): None picks `default_compute_dtype` per layer."""
    if method not in QUANT_TYPES:
        raise ValueError(f"unknown quantization {method!r}; choose from {', '.join(QUANT_TYPES)}")
    import bitsandbytes as bnb

    warnings.filterwarnings("ignore", message=".*MatMul8bitLt.*")
    patterns = [re.compile(p) for p in skip]
    report = QuantReport(method)
    for name, module in list(model.named_modules()):
        if name.endswith("block_sparse_moe.gate"):
            module.weight.data = module.weight.data.to(torch.float16)
            report.router_fp16.append(name)
        if type(module) not in (nn.Linear, Linear):  # not bnb's subclasses
            continue
        # bnb's CPU 4-bit kernel packs 64-wide input blocks and 32-row output blocks
        too_small = method != "int8" and (
            module.in_features % 64 != 0 or module.out_features % 32 != 0
        )
        if (
            any(p.search(name) for p in patterns)
            or keep_high_precision(name + ".weight")
            or too_small
        ):
            report.skipped.append(name)
            continue
        dtype = compute_dtype or default_compute_dtype(module.weight)
        _replace(model, name, _quantized_linear(bnb, module, method, dtype))
        report.quantized.append(name)
    if getattr(model.config, "tie_word_embeddings", False):
        model.lm_head.weight = model.model.embed_tokens.weight
    return report


def default_compute_dtype(weight: torch.Tensor) -> torch.dtype:
    """bf16, but fp32 for CPU weights where bf16 products are slow (`layers/linear.py`):
    bitsandbytes' CPU 4-bit path there dequantizes and multiplies in the compute dtype (nf4
    k3-smol on a Zen 3: prefill 62 -> 293 tok/s, decode 3.0 -> 5.5; `benchmarks/cpu_bf16.py`)."""
    if weight.device.type == "cpu" and cpu_bf16_is_slow():
        return torch.float32
    return torch.bfloat16


def _quantized_linear(bnb, lin: nn.Linear, method: str, compute_dtype: torch.dtype) -> nn.Module:
    w = lin.weight.data
    if method == "int8":
        q = bnb.nn.Linear8bitLt(
            lin.in_features, lin.out_features, bias=False, has_fp16_weights=False, threshold=0.0
        )
        q.weight = bnb.nn.Int8Params(
            w.to(torch.float16).contiguous(), requires_grad=False, has_fp16_weights=False
        )
    else:
        q = bnb.nn.Linear4bit(
            lin.in_features,
            lin.out_features,
            bias=False,
            compute_dtype=compute_dtype,
            quant_type=method,
        )
        q.weight = bnb.nn.Params4bit(
            w.to(compute_dtype).contiguous(), requires_grad=False, quant_type=method
        )
    q = q.to(w.device if w.device.type != "meta" else "cpu")
    return q.eval()


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, attr, new)
