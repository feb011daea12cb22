"""Gated NoPE Multi-head Latent Attention (spec §2.4).

Per token the cache keeps only the normalised latent c (kv_lora_rank) and the shared,
un-rotated k_pe (qk_rope_head_dim): 576 values for K3. Prefill expands the latent into per-head
K/V (naive); decode absorbs `kv_b_proj` into the query and the output instead — exact algebra:
`score = (W_UKᵀ q_nope)·c + q_pe·k_pe`, `out_h = W_UV,h Σ p c`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..cache import MLACache
from ..config import K3Config
from .gqa import causal_mask
from .linear import Linear
from .norm import RMSNorm
from .sdpa import attention

ABSORB_MAX_TOKENS = 4
"""Queries per step up to which decode uses the absorbed path."""


class MLAttention(nn.Module):
    def __init__(self, config: K3Config, layer_idx: int) -> None:
        super().__init__()
        H = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.nope, self.rope, self.v_dim = (
            config.qk_nope_head_dim,
            config.qk_rope_head_dim,
            config.v_head_dim,
        )
        self.rank = config.kv_lora_rank
        self.scale = (self.nope + self.rope) ** -0.5
        qk = self.nope + self.rope
        if config.q_lora_rank:
            self.q_a_proj = Linear(H, config.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(config.q_lora_rank, config.mla_lora_norm_eps)
            self.q_b_proj = Linear(config.q_lora_rank, self.n_heads * qk, bias=False)
        else:
            self.q_proj = Linear(H, self.n_heads * qk, bias=False)
        self.kv_a_proj_with_mqa = Linear(H, self.rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, config.mla_lora_norm_eps)
        self.kv_b_proj = Linear(self.rank, self.n_heads * (self.nope + self.v_dim), bias=False)
        self.g_proj = (
            Linear(H, self.n_heads * self.v_dim, bias=False) if config.mla_use_output_gate else None
        )
        self.o_proj = Linear(self.n_heads * self.v_dim, H, bias=False)

    def _query(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        if hasattr(self, "q_a_proj"):
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        q = q.view(B, T, self.n_heads, self.nope + self.rope)
        return q[..., : self.nope], q[..., self.nope :]  # [B, T, h, nope], [B, T, h, rope]

    def forward(
        self,
        x: torch.Tensor,
        cache: MLACache | None = None,
        start: int = 0,
        absorb: bool | None = None,
    ) -> torch.Tensor:
        B, T, _ = x.shape
        q_nope, q_pe = self._query(x)
        kv = self.kv_a_proj_with_mqa(x)
        c = self.kv_a_layernorm(kv[..., : self.rank])  # [B, T, R]
        k_pe = kv[..., self.rank :]  # [B, T, rope]
        if cache is not None:
            c = cache.bufs["latent"].append(c)
            k_pe = cache.bufs["k_pe"].append(k_pe)
        if absorb is None:
            # offloaded kv_b_proj weights only exist while the module runs: then expand instead
            absorb = (
                cache is not None
                and T <= ABSORB_MAX_TOKENS
                and c.shape[1] > T
                and not self.kv_b_proj.weight.is_meta
            )
        o = self._absorbed(q_nope, q_pe, c, k_pe) if absorb else self._naive(q_nope, q_pe, c, k_pe)
        o = o.reshape(B, T, self.n_heads * self.v_dim)
        if self.g_proj is not None:
            o = o * torch.sigmoid(self.g_proj(x))
        return self.o_proj(o)

    def _naive(self, q_nope, q_pe, c, k_pe) -> torch.Tensor:
        """Expand the latent into per-head K and V, then causal softmax attention."""
        B, T, h, _ = q_nope.shape
        Tk = c.shape[1]
        kv = self.kv_b_proj(c).view(B, Tk, h, self.nope + self.v_dim)
        k_nope, v = kv[..., : self.nope], kv[..., self.nope :]
        k = torch.cat([k_nope, k_pe[:, :, None, :].expand(B, Tk, h, self.rope)], dim=-1)
        q = torch.cat([q_nope, q_pe], dim=-1)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, h, T, D]
        mask = None if Tk == T or T == 1 else causal_mask(T, Tk, q.device)
        o = attention(q, k, v, attn_mask=mask, is_causal=Tk == T and T > 1, scale=self.scale)
        return o.transpose(1, 2)  # [B, T, h, v]

    def _absorbed(self, q_nope, q_pe, c, k_pe) -> torch.Tensor:
        """Attention in latent space: never materialises per-head K/V for the cached tokens."""
        B, T, h, _ = q_nope.shape
        Tk = c.shape[1]
        w = self.kv_b_proj.weight.view(h, self.nope + self.v_dim, self.rank)
        w_uk, w_uv = w[:, : self.nope], w[:, self.nope :]  # [h, nope, R], [h, v, R]
        f = torch.promote_types(q_nope.dtype, torch.float32)  # at least fp32
        q_lat = torch.einsum("bthn,hnr->bthr", q_nope.to(f), w_uk.to(f))
        score = torch.einsum("bthr,bsr->bhts", q_lat, c.to(f))
        score = score + torch.einsum("bthp,bsp->bhts", q_pe.to(f), k_pe.to(f))
        score = score * self.scale
        if T > 1:
            score = score.masked_fill(~causal_mask(T, Tk, c.device), float("-inf"))
        p = torch.softmax(score, dim=-1)
        ctx = torch.einsum("bhts,bsr->bthr", p, c.to(f))
        return torch.einsum("bthr,hvr->bthv", ctx, w_uv.to(f)).to(q_nope.dtype)
