"""KDA decode: the per-token recurrence with as few tensor ops per token as possible.

Same math as `naive.naive_recurrent_kda` (research/k3-architecture.md §2.5 step 6), laid out
for decode, where T is 1 and the cost is Python dispatch plus one pass over the [K, V] state:
heads are folded into the batch of `bmm`/`baddbmm`, and the state can be updated in place so a
cache need not copy 64 KiB per head per token.
"""

from __future__ import annotations

import torch

from k3chat_model.ops.delta_rule._checks import check_kda_inputs


def recurrent_kda_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    S: torch.Tensor,
) -> torch.Tensor:
    """Advance the state `S` by one token, in place, and return o.

    Args:
        q, k, g (torch.Tensor):
            `[N, K]` fp32, q already scaled; N = B*H.
        v (torch.Tensor):
            `[N, V]` fp32.
        beta (torch.Tensor):
            `[N, 1]` fp32.
        S (torch.Tensor):
            `[N, K, V]` fp32 state, overwritten with the new state.

    Returns:
        o `[N, V]` fp32.
    """
    S.mul_(g.exp().unsqueeze(-1))  # [N, K, V]
    kS = torch.bmm(k.unsqueeze(1), S).squeeze(1)  # [N, V]
    u = (v - kS).mul_(beta)  # [N, V]
    S.baddbmm_(k.unsqueeze(-1), u.unsqueeze(1))  # [N, K, V]
    return torch.bmm(q.unsqueeze(1), S).squeeze(1)  # [N, V]


def fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    *,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run KDA token by token; meant for decode (T small, usually 1).

    Args:
        q, k (torch.Tensor):
            `[B, T, H, K]`, already L2-normalised by the caller.
        v (torch.Tensor):
            `[B, T, H, V]`.
        g (torch.Tensor):
            log-decay `[B, T, H, K]`, activated (<= 0).
        beta (torch.Tensor):
            `[B, T, H]`, post-sigmoid.
        scale (float | None):
            multiplies q. Default: `K ** -0.5`.
        initial_state (torch.Tensor | None):
            fp32 `[B, H, K, V]`; zeros when None. Default: `None`.
        output_final_state (bool):
            return the state after the last token. Default: `False`.
        inplace (bool):
            write the new state into `initial_state` (must be contiguous) instead of a copy;
            the returned final state is then that same tensor. Default: `False`.

    Returns:
        o `[B, T, H, V]` in v's dtype, and the final fp32 state `[B, H, K, V]` or None.

    Raises:
        ValueError: a shape does not match, or `initial_state` is not fp32.
    """
    check_kda_inputs(q, k, v, g, beta, initial_state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = K**-0.5 if scale is None else scale
    if initial_state is None:
        S = q.new_zeros(B * H, K, V, dtype=dt)
    elif inplace:
        if not initial_state.is_contiguous() or initial_state.dtype != dt:
            raise ValueError(f"inplace=True needs a contiguous {dt} initial_state")
        S = initial_state.view(B * H, K, V)
    else:
        S = initial_state.to(dt).reshape(B * H, K, V).clone()
    # fold heads into the batch once, so the per-token loop only indexes dim 0
    qt = (q.to(dt) * scale).transpose(0, 1).reshape(T, B * H, K)
    kt = k.to(dt).transpose(0, 1).reshape(T, B * H, K)
    vt = v.to(dt).transpose(0, 1).reshape(T, B * H, V)
    gt = g.to(dt).transpose(0, 1).reshape(T, B * H, K)
    bt = beta.to(dt).transpose(0, 1).reshape(T, B * H, 1)
    o = torch.stack([recurrent_kda_step(qt[t], kt[t], vt[t], gt[t], bt[t], S) for t in range(T)])
    o = o.view(T, B, H, V).transpose(0, 1).to(v.dtype)  # [B, T, H, V]
    if not output_final_state:
        return o, None
    return o, (initial_state if inplace and initial_state is not None else S.view(B, H, K, V))
