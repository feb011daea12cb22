"""LatentMoE (K3) and the plain MoE of Kimi Linear (spec §2.6).

Router on the full-width x in fp32: `s = σ(x Wᵀ)`; experts are *selected* by `s + bias` but
*weighted* by the unbiased `s`, renormalised, times `routed_scaling_factor`. LatentMoE runs the
experts on `z = down(x)`, normalises their fp32-accumulated sum and projects it back up; the
shared experts always see the full-width x.

A LatentMoE whose up-projection is zero adds exactly nothing through its routed path: converted
dense models start that way (k3-smol: the routed path is a zero-initialised adapter beside the
teacher's MLP), and there routing, expert dispatch and the latent norm were a third of the MoE
block's time. Such a block runs its shared experts only, unless a routed weight is training.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import K3Config
from .linear import Linear
from .mlp import Expert, GatedMLP
from .norm import RMSNorm
from .zero import is_zero


class Router(nn.Module):
    """`gate.weight` [E, H] and `gate.e_score_correction_bias` [E] (kept fp32)."""

    def __init__(self, config: K3Config) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.e_score_correction_bias = nn.Parameter(
            torch.zeros(config.num_experts), requires_grad=False
        )
        self.top_k = config.num_experts_per_token
        self.renormalize = config.moe_renormalize
        self.scaling = config.routed_scaling_factor
        self.activation = config.moe_router_activation_func

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, H] -> (expert ids [N, k], weights [N, k] fp32)."""
        logits = x.float() @ self.weight.float().t()  # [N, E]
        s = torch.sigmoid(logits) if self.activation == "sigmoid" else torch.softmax(logits, -1)
        choice = s + self.e_score_correction_bias.float()
        idx = torch.topk(choice, self.top_k, dim=-1, sorted=False).indices
        w = s.gather(-1, idx)
        if self.renormalize:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * self.scaling


class SparseMoE(nn.Module):
    """`block_sparse_moe`: router, routed experts (optionally latent), shared experts."""

    def __init__(self, config: K3Config, expert_linear=Linear) -> None:
        super().__init__()
        H = config.hidden_size
        self.latent = config.routed_expert_hidden_size
        width = self.latent or H
        self.gate = Router(config)
        self.experts = nn.ModuleList(
            Expert(config, width, config.moe_intermediate_size, expert_linear)
            for _ in range(config.num_experts)
        )
        if self.latent:
            self.routed_expert_down_proj = Linear(H, self.latent, bias=False)
            self.routed_expert_up_proj = Linear(self.latent, H, bias=False)
            self.routed_expert_norm = (
                RMSNorm(self.latent, config.rms_norm_eps) if config.latent_moe_use_norm else None
            )
        self.shared_experts = (
            GatedMLP(config, H, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts
            else None
        )
        self._zero_up: dict = {}

    def routed_path_is_off(self) -> bool:
        """True when the routed experts add exactly 0 and nothing in them needs a gradient."""
        if not self.latent or self.shared_experts is None:
            return False
        if torch.is_grad_enabled() and any(
            p.requires_grad
            for m in (
                self.gate,
                self.experts,
                self.routed_expert_down_proj,
                self.routed_expert_up_proj,
            )
            for p in m.parameters()
        ):
            return False
        return is_zero(self.routed_expert_up_proj.weight, self._zero_up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.routed_path_is_off():
            return self.shared_experts(x)
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # [N, H]
        idx, w = self.gate(x)
        z = self.routed_expert_down_proj(x) if self.latent else x  # [N, W]
        y = self._run_experts(z, idx, w).to(x.dtype)
        if self.latent:
            if self.routed_expert_norm is not None:
                y = self.routed_expert_norm(y)
            y = self.routed_expert_up_proj(y)
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.reshape(shape)

    def _run_experts(self, z: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Σ_k w_k·expert_{e_k}(z), accumulated in fp32; only experts that got tokens run."""
        if z.shape[0] == 1:  # decode: no sorting or scatter for one token
            out = torch.zeros(1, z.shape[1], dtype=torch.float32, device=z.device)
            for e, we in zip(idx[0].tolist(), w[0]):
                out += self.experts[e](z).float() * we
            return out
        out = torch.zeros(z.shape[0], z.shape[1], dtype=torch.float32, device=z.device)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        token_of = order // idx.shape[1]
        weight_of = w.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            tok = token_of[start : start + n]
            ye = self.experts[e](z[tok]).float() * weight_of[start : start + n, None]
            out.index_add_(0, tok, ye)
            start += n
        return out
