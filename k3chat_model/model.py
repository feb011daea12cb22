"""K3ForCausalLM: embedding → decoder layers → output AttnRes → norm → lm_head (spec §2.1).

With Block Attention Residuals there is no ordinary residual stream: each layer carries
`prefix` (the sum of sub-layer outputs in the current block) and `blocks` (completed block
sums; the embedding is block 0). Without them (Kimi Linear) it is the usual pre-norm stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .cache import Cache
from .config import K3Config
from .layers.attnres import AttnResSite, Blocks
from .layers.gqa import GQAAttention
from .layers.kda import KimiDeltaAttention
from .layers.linear import Linear
from .layers.mla import MLAttention
from .layers.mlp import GatedMLP
from .layers.moe import SparseMoE
from .layers.norm import RMSNorm

MIXERS = {"kda": KimiDeltaAttention, "mla": MLAttention, "gqa": GQAAttention}


class DecoderLayer(nn.Module):
    def __init__(self, config: K3Config, layer_idx: int, expert_linear=Linear) -> None:
        super().__init__()
        H, eps = config.hidden_size, config.rms_norm_eps
        self.idx = layer_idx
        self.block_size = config.attn_res_block_size
        self.self_attn = MIXERS[config.layer_kinds[layer_idx]](config, layer_idx)
        if config.is_moe_layer(layer_idx):
            self.block_sparse_moe = SparseMoE(config, expert_linear)
        else:
            self.mlp = GatedMLP(config, H, config.intermediate_size)
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        if self.block_size:
            self.self_attention_res = AttnResSite(H, eps)
            self.mlp_res = AttnResSite(H, eps)

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_sparse_moe(x) if hasattr(self, "block_sparse_moe") else self.mlp(x)

    def forward(self, prefix: torch.Tensor, blocks: list[torch.Tensor], cache=None, start: int = 0):
        if not self.block_size:
            h = prefix + self.self_attn(self.input_layernorm(prefix), cache, start)
            return h + self.ffn(self.post_attention_layernorm(h)), blocks
        # spec §2.2: blend for the attention input, then maybe close a block (unblended prefix)
        x = self.self_attention_res(prefix, blocks) if blocks else prefix
        if self.idx % self.block_size == 0:
            blocks, prefix = Blocks([*blocks, prefix]), None
        a = self.self_attn(self.input_layernorm(x), cache, start)
        prefix = a if prefix is None else prefix + a
        y = self.mlp_res(prefix, blocks)
        return prefix + self.ffn(self.post_attention_layernorm(y)), blocks


class K3Model(nn.Module):
    def __init__(self, config: K3Config, expert_linear=Linear) -> None:
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, H)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, expert_linear) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(H, config.rms_norm_eps)
        if config.uses_attn_res:
            self.output_attn_res = AttnResSite(H, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, cache: Cache | None = None) -> torch.Tensor:
        start = cache.seen if cache is not None else 0
        prefix, blocks = self.embed_tokens(input_ids), Blocks()  # [B, T, H]
        for i, layer in enumerate(self.layers):
            prefix, blocks = layer(
                prefix, blocks, cache.layers[i] if cache is not None else None, start
            )
        h = self.output_attn_res(prefix, blocks) if self.config.uses_attn_res else prefix
        if cache is not None:
            cache.seen += input_ids.shape[1]
            cache.maybe_spill()
        return self.norm(h)


@dataclass
class CausalLMOutput:
    logits: torch.Tensor
    """[B, T_kept, vocab]."""


class K3ForCausalLM(nn.Module):
    def __init__(self, config: K3Config, expert_linear=Linear) -> None:
        super().__init__()
        self.config = config
        self.model = K3Model(config, expert_linear)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def make_cache(self, **kw) -> Cache:
        return Cache(self.config.layer_kinds, **kw)

    def forward(
        self, input_ids: torch.Tensor, cache: Cache | None = None, num_logits: int | None = None
    ) -> CausalLMOutput:
        """input_ids [B, T]. `num_logits`: compute logits for the last N positions only."""
        h = self.model(input_ids, cache)
        if num_logits is not None:
            # contiguous: for B > 1 the slice is strided, and matmul then copies the head once
            # per row (a batch-48 prefill: seconds instead of milliseconds)
            h = h[:, -num_logits:].contiguous()
        return CausalLMOutput(self.lm_head(h))

    @torch.no_grad()
    def generate_naive(self, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy decoding that re-runs the whole sequence each step: the slow reference."""
        ids = input_ids
        for _ in range(max_new_tokens):
            nxt = self(ids, num_logits=1).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        return ids
