"""KDA prefill in chunks: the WY/UT form, batched over all chunks and heads.

Same math as `naive.naive_recurrent_kda` (research/k3-architecture.md §2.5 step 6), regrouped
as in research/engine-anchors.md §5.3. Per chunk of C tokens with G = cumsum(g) inside it:

    A_kk[r,s] = beta_r sum_d k_rd k_sd exp(G_rd - G_sd)   (s < r)
    A_qk[r,s] =        sum_d q_rd k_sd exp(G_rd - G_sd)   (s <= r)
    [W U] = (I + A_kk)^-1 Diag(beta) [k*exp(G)  v]        one unit-triangular solve
    u = U - W S0;  O = (q*exp(G)) S0 + A_qk u;  S1 = Diag(exp G_C) S0 + (k*exp(G_C - G))^T u

Only the last line and `u` run chunk after chunk; the rest is batched over every chunk and head.

Overflow. The factorised `exp(G_r - G_s) = exp(G_r - ref) exp(ref - G_s)` overflows fp32 once
|G_r - ref| passes ~88, which a 64-token chunk at K3's gate bound (-5 per step) reaches. So rows
go in 16-token sub-blocks, each factorised around the point just before it (two levels, see
`_intra_chunk_scores`): safe for any gate >= -5.3, i.e. always for K3; stronger gates (Kimi
Linear's unbounded softplus gate) switch the diagonal sub-blocks to exact pairwise decay.

Denormals. Under strong decay, factors like exp(G) shrink to ~1e-35 and their products fall
below fp32's normal range, where x86 arithmetic runs several times slower. Factors that are
true decays (<= 1 and never paired with a factor > 1: exp(G), exp(G_C - G), the column factors
of earlier sub-blocks) are set to exactly 0 at or below exp(-60) by `_decay`: 1.5-2.2x faster
near K3's bound, the same speed and error under mild gates (`benchmarks/kda_ab.py`). The row
factors keep `_exp`: they meet column factors up to exp(85), so flushing them would be wrong
(a global flush-to-zero changed the output by 9e-5 relative at the bound).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from k3chat_model.ops.delta_rule._checks import check_kda_inputs

# below this exp() leaves fp32's normal range and runs ~10x slower; every clamped factor meets
# a partner <= 1, so the clamp changes a product by less than exp(-80)
_MIN_EXPONENT = -80.0
# a sub-block grows its column factor to exp(16|g|); exp(85) = 8e36 still fits fp32
_MAX_EXPONENT = 85.0
# a decay factor at or below exp(-60) is set to 0 (see `_decay`)
_DECAY_FLOOR = math.exp(-60.0)
SUB = 16
# elements per [B*H*T, K] work tensor before a prompt is split (64 MiB in fp32)
_SEGMENT_ELEMENTS = 1 << 24


def _exp(x: torch.Tensor) -> torch.Tensor:
    return x.clamp_(min=_MIN_EXPONENT).exp_()


def _decay(x: torch.Tensor) -> torch.Tensor:
    """exp(x), with values at or below exp(-60) set to exactly 0; only for factors whose small
    values are true decays (never paired with a factor > 1). Factors >= 1 pass unchanged.

    Such a decay only shrinks the O(1) term it scales, so zeroing it changes a sum by less
    than 1e-26 of that term; kept, its products fall into fp32's denormal range, where
    x86 arithmetic is several times slower (docs/benchmarks.md, "Denormal floats in KDA")."""
    return F.threshold_(x.exp_(), _DECAY_FLOOR, 0.0)


def _intra_chunk_scores(
    q: torch.Tensor, k: torch.Tensor, G: torch.Tensor, exact_diag: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return k·k and q·k decay-weighted scores `[n, C, C]`, valid on and below the diagonal.

    Rows of sub-block i use the reference B_i = G just before the sub-block: the row factor
    exp(G_r - B_i) is <= 1, and so is every column factor exp(B_i - G_s) for s before the
    sub-block. Inside it the column factor reaches exp(16|g|), fine for g >= -5.3; stronger
    gates take `exact_diag`, which builds the 16x16 diagonal blocks pairwise instead.
    """
    n, C, K = k.shape
    sub = min(SUB, C)
    nb = C // sub
    Gb = G.view(n, nb, sub, K)
    ref = torch.cat([G.new_zeros(n, 1, K), Gb[:, :-1, -1]], dim=1)  # [n, nb, K]
    left = _exp(Gb - ref.unsqueeze(2))  # [n, nb, sub, K]
    kb, qb = k.view(n, nb, sub, K), q.view(n, nb, sub, K)
    rows = torch.cat([kb * left, qb * left], dim=2)  # [n, nb, 2*sub, K]
    A_kk = k.new_zeros(n, C, C)
    A_qk = k.new_zeros(n, C, C)
    # column factors built K-major, so each bmm reads a contiguous right operand
    kT, GT = k.transpose(1, 2).contiguous(), G.transpose(1, 2).contiguous()  # [n, K, C]
    for i in range(nb):
        lo, hi = i * sub, (i + 1) * sub
        cols = lo if exact_diag else hi
        if cols == 0:
            continue
        # column factors: <= 1 before the sub-block (true decays), >= 1 inside it
        right = kT[:, :, :cols] * _decay(ref[:, i, :, None] - GT[:, :, :cols])  # [n, K, cols]
        blk = torch.bmm(rows[:, i], right)  # [n, 2*sub, cols]
        A_kk[:, lo:hi, :cols] = blk[:, :sub]
        A_qk[:, lo:hi, :cols] = blk[:, sub:]
    if exact_diag:
        # exp(G_r - G_s) per pair: <= 1 on and below the diagonal; above it is masked later
        decay = _decay((Gb.unsqueeze(3) - Gb.unsqueeze(2)).clamp_(max=0.0))  # [n, nb, sub, sub, K]
        dkk = torch.einsum("nbrk,nbrsk,nbsk->nbrs", kb, decay, kb)  # [n, nb, sub, sub]
        dqk = torch.einsum("nbrk,nbrsk,nbsk->nbrs", qb, decay, kb)  # [n, nb, sub, sub]
        for i in range(nb):
            A_kk[:, i * sub : (i + 1) * sub, i * sub : (i + 1) * sub] = dkk[:, i]
            A_qk[:, i * sub : (i + 1) * sub, i * sub : (i + 1) * sub] = dqk[:, i]
    return A_kk, A_qk


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run KDA over a whole sequence in chunks; meant for prefill.

    Args:
        q, k (torch.Tensor):
            `[B, T, H, K]`, already L2-normalised by the caller.
        v (torch.Tensor):
            `[B, T, H, V]`.
        g (torch.Tensor):
            log-decay `[B, T, H, K]`, activated, finite and <= 0.
        beta (torch.Tensor):
            `[B, T, H]`, post-sigmoid.
        scale (float | None):
            multiplies q. Default: `K ** -0.5`.
        initial_state (torch.Tensor | None):
            fp32 `[B, H, K, V]`; zeros when None. Default: `None`.
        output_final_state (bool):
            return the state after the last token. Default: `False`.
        chunk_size (int):
            tokens per chunk: 16, 32, 64 or 128; T need not be a multiple. Default: `64`.

    Returns:
        o `[B, T, H, V]` in v's dtype, and the final fp32 state `[B, H, K, V]` or None.
        Internals are fp32 (float64 when the inputs are float64).

    Raises:
        ValueError: a shape does not match, `initial_state` is not fp32, or a bad chunk_size.

    Memory: prompts longer than 2^24 / (B*H*max(K, V)) tokens (1344 for K3's 96 heads of 128)
    run as consecutive segments carrying the state, so peak work memory stays ~1 GiB.

    Example:
        >>> o, S = chunk_kda(q, k, v, g, beta, output_final_state=True)
        >>> o2, _ = fused_recurrent_kda(q2, k2, v2, g2, beta2, initial_state=S)
    """
    if chunk_size not in (16, 32, 64, 128):
        raise ValueError(f"chunk_size must be 16, 32, 64 or 128, got {chunk_size}")
    check_kda_inputs(q, k, v, g, beta, initial_state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    # long prompts go through in segments so the ~12 work tensors stay near _SEGMENT_ELEMENTS
    seg = max(chunk_size, _SEGMENT_ELEMENTS // (B * H * max(K, V)) // chunk_size * chunk_size)
    if T <= seg:
        return _chunk_kda(q, k, v, g, beta, scale, initial_state, output_final_state, chunk_size)
    outs, state = [], initial_state
    for t0 in range(0, T, seg):
        part = (x[:, t0 : t0 + seg] for x in (q, k, v, g, beta))
        o, state = _chunk_kda(*part, scale, state, True, chunk_size)
        outs.append(o)
    return torch.cat(outs, dim=1), (state if output_final_state else None)


def _chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    initial_state: torch.Tensor | None,
    output_final_state: bool,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = chunk_size
    N = -(-T // C)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = K**-0.5 if scale is None else scale

    def chunked(x: torch.Tensor) -> torch.Tensor:
        # one copy into chunk-major [N*B*H, C, *] so each chunk's heads are contiguous;
        # zero padding is inert: g=0 keeps the state, k=0 and beta=0 write nothing
        out = x.new_zeros(N, B, H, C, x.shape[-1], dtype=dt)  # [N, B, H, C, *]
        dst, src = out.permute(0, 3, 1, 2, 4), x.transpose(0, 1)  # [N, C, B, H, *], [T, B, H, *]
        full = T // C
        dst[:full].copy_(src[: full * C].unflatten(0, (full, C)))
        if T > full * C:
            dst[full, : T - full * C].copy_(src[full * C :])
        return out.view(N * B * H, C, x.shape[-1])

    qc, kc, vc, gc = chunked(q), chunked(k), chunked(v), chunked(g)
    qc.mul_(scale)
    bc = chunked(beta.unsqueeze(-1))  # [NBH, C, 1]
    G = gc.cumsum(1)  # [NBH, C, K]
    g_min = float(g.min()) if g.numel() else 0.0
    exact_diag = min(SUB, C) * -g_min > _MAX_EXPONENT
    A_kk, A_qk = _intra_chunk_scores(qc, kc, G, exact_diag)
    A_kk = A_kk.tril_(-1).mul_(bc)  # [NBH, C, C]
    A_qk = A_qk.tril_()  # [NBH, C, C]

    eG = _decay(G.clone())  # [NBH, C, K]
    rhs = torch.cat([kc * eG, vc], dim=-1).mul_(bc)  # [NBH, C, K+V]
    # explicit (I + A_kk)^-1 and one bmm: ~2x faster on CPU than a solve with K+V columns
    eye = torch.eye(C, dtype=dt, device=q.device).expand_as(A_kk)
    Tinv = torch.linalg.solve_triangular(A_kk, eye, upper=False, unitriangular=True)
    WU = torch.bmm(Tinv, rhs)  # [NBH, C, K+V]
    W, U = WU[..., :K], WU[..., K:]  # [NBH, C, K], [NBH, C, V]
    KdT = (kc * _decay(G[:, -1:] - G)).transpose(1, 2).contiguous()  # [NBH, K, C]

    # sequential part, per chunk n: u = U - W S;  S <- Diag(exp G_last) S + Kd^T u
    W, U, KdT = (x.view(N, B * H, *x.shape[1:]) for x in (W, U, KdT))
    decay = eG[:, -1].view(N, B * H, K, 1)
    S_all = torch.empty(N + 1, B * H, K, V, dtype=dt, device=q.device)
    u_all = torch.empty(N, B * H, C, V, dtype=dt, device=q.device)
    if initial_state is None:
        S_all[0].zero_()
    else:
        S_all[0].copy_(initial_state.reshape(B * H, K, V))
    for n in range(N):
        torch.baddbmm(U[n], W[n], S_all[n], alpha=-1, out=u_all[n])
        torch.mul(S_all[n], decay[n], out=S_all[n + 1])
        S_all[n + 1].baddbmm_(KdT[n], u_all[n])

    # O = (q exp G) S + A_qk u, for all chunks at once
    o = torch.bmm(A_qk, u_all.view(N * B * H, C, V))  # [NBH, C, V]
    o.baddbmm_(qc.mul_(eG), S_all[:N].view(N * B * H, K, V))
    o = o.view(N, B, H, C, V).permute(1, 0, 3, 2, 4).reshape(B, N * C, H, V)[:, :T]
    final = S_all[N].view(B, H, K, V) if output_final_state else None
    return o.to(v.dtype), final
