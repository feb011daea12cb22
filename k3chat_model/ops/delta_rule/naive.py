"""Plain per-token KDA recurrence: the reference every fast form is checked against.

Kimi Delta Attention (research/k3-architecture.md §2.5 step 6; arXiv 2510.26692), one token at
a time, exactly as the spec writes it:

    S' = Diag(exp g_t) S;  u = beta_t (v_t - S'^T k_t);  S = S' + k_t u^T;  o_t = S^T (scale q_t)

Everything runs in fp32, or in float64 when the inputs are float64 (so tests can build an
exact reference). Slow on purpose: no algebra, no batching over time.
"""

from __future__ import annotations

import torch


def naive_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the KDA recurrence token by token.

    Args:
        q, k (torch.Tensor):
            queries and keys `[B, T, H, K]`, already L2-normalised by the caller.
        v (torch.Tensor):
            values `[B, T, H, V]`.
        g (torch.Tensor):
            per-channel log-decay `[B, T, H, K]`, already activated (<= 0).
        beta (torch.Tensor):
            write strength `[B, T, H]`, post-sigmoid.
        scale (float | None):
            multiplies q. Default: `K ** -0.5`.
        initial_state (torch.Tensor | None):
            `[B, H, K, V]`; zeros when None. Default: `None`.
        output_final_state (bool):
            return the state after the last token. Default: `False`.

    Returns:
        o `[B, T, H, V]` in v's dtype, and the final state `[B, H, K, V]` (fp32, or float64 for
        float64 inputs) or None.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = K**-0.5 if scale is None else scale
    q, k, v, g, beta = (x.to(dt) for x in (q, k, v, g, beta))
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(dt).clone()
    o = torch.empty(B, T, H, V, dtype=dt, device=q.device)
    for t in range(T):
        S = S * g[:, t].exp()[..., None]  # [B, H, K, V]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))  # [B, H, V]
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)  # [B, H, K, V]
        o[:, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, t] * scale)  # [B, H, V]
    return o.to(v.dtype), (S if output_final_state else None)
