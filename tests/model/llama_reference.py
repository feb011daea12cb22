"""A plain-PyTorch Llama forward, written only for tests: the teacher k3-smol must reproduce.

It shares no code with the engine or with ``k3chat_model.gguf``: it dequantizes the GGUF itself
(``gguf.quants.dequantize``) and runs attention as explicit matmuls + softmax. It supports both
RoPE layouts, so the same forward can run the GGUF weights as llama.cpp stores them (q/k rows
permuted, adjacent pairs rotate: ``rope="pairs"``) and weights read back from a k3-smol
checkpoint (Hugging Face rotate-half: ``rope="half"``). Agreement between the two proves the
converter's un-permutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class LlamaRef:
    """Weights keyed ``embed``, ``norm``, ``{i}.attn_norm``, ``{i}.wq`` … ``{i}.w_down``."""

    weights: dict[str, torch.Tensor]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    rope_theta: float
    eps: float
    rope: str  # "pairs" (llama.cpp GGUF layout) or "half" (HF layout)

    @property
    def head_dim(self) -> int:
        return self.weights["embed"].shape[1] // self.n_heads


_GGUF_NAMES = {
    "attn_norm": "attn_norm",
    "ffn_norm": "ffn_norm",
    "wq": "attn_q",
    "wk": "attn_k",
    "wv": "attn_v",
    "wo": "attn_output",
    "w_gate": "ffn_gate",
    "w_up": "ffn_up",
    "w_down": "ffn_down",
}


def load_gguf_teacher(path: str | Path) -> LlamaRef:
    """Read a llama GGUF as llama.cpp stores it (q/k rows in adjacent-pair RoPE order)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))

    def scalar(key: str) -> float:
        field = reader.fields[key]
        return field.parts[field.data[0]].tolist()[0]

    raw = {}
    for t in reader.tensors:
        arr = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)
        raw[t.name] = torch.from_numpy(arr.reshape(tuple(reversed(t.shape.tolist()))))
    n_layers = int(scalar("llama.block_count"))
    w = {"embed": raw["token_embd.weight"], "norm": raw["output_norm.weight"]}
    for i in range(n_layers):
        for ours, theirs in _GGUF_NAMES.items():
            w[f"{i}.{ours}"] = raw[f"blk.{i}.{theirs}.weight"]
    return LlamaRef(
        weights=w,
        n_layers=n_layers,
        n_heads=int(scalar("llama.attention.head_count")),
        n_kv_heads=int(scalar("llama.attention.head_count_kv")),
        rope_theta=float(scalar("llama.rope.freq_base")),
        eps=float(scalar("llama.attention.layer_norm_rms_epsilon")),
        rope="pairs",
    )


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, theta: float, layout: str) -> torch.Tensor:
    """Rotate ``x`` [T, H, D]; channel pair i turns by ``pos · theta^(-2i/D)``."""
    t, _, d = x.shape
    inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]  # [T, D/2]
    cos, sin = ang.cos().to(x.dtype)[:, None, :], ang.sin().to(x.dtype)[:, None, :]
    if layout == "pairs":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(x.shape)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


@torch.no_grad()
def forward(
    ref: LlamaRef, ids: list[int], *, dtype: torch.dtype = torch.float32, last_only: bool = False
) -> torch.Tensor:
    """Logits ``[T, V]`` (or ``[1, V]`` with ``last_only``) for one sequence, no cache."""
    w = {k: v.to(dtype) for k, v in ref.weights.items()}
    nh, nkv, d = ref.n_heads, ref.n_kv_heads, ref.head_dim
    h = w["embed"][torch.tensor(ids)]  # [T, C]
    t = h.shape[0]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(ref.n_layers):
        x = _rms(h, w[f"{i}.attn_norm"], ref.eps)
        q = _rope((x @ w[f"{i}.wq"].T).view(t, nh, d), ref.rope_theta, ref.rope)
        k = _rope((x @ w[f"{i}.wk"].T).view(t, nkv, d), ref.rope_theta, ref.rope)
        v = (x @ w[f"{i}.wv"].T).view(t, nkv, d)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / d**0.5
        p = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("hts,shd->thd", p, v).reshape(t, nh * d)
        h = h + o @ w[f"{i}.wo"].T
        x = _rms(h, w[f"{i}.ffn_norm"], ref.eps)
        gate = torch.nn.functional.silu(x @ w[f"{i}.w_gate"].T)
        h = h + (gate * (x @ w[f"{i}.w_up"].T)) @ w[f"{i}.w_down"].T
    if last_only:
        h = h[-1:]
    return _rms(h, w["norm"], ref.eps) @ w["embed"].T


def greedy(ref: LlamaRef, ids: list[int], n_new: int) -> list[int]:
    """Greedy continuation by re-running the full forward each step (slow and obvious)."""
    out = list(ids)
    for _ in range(n_new):
        out.append(int(forward(ref, out, last_only=True)[0].argmax()))
    return out[len(ids) :]
