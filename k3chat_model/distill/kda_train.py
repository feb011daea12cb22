"""Differentiable chunked KDA for distillation (the inference op in `ops.delta_rule` writes
in place with `out=` and cannot be backpropagated through).

Chunk form (chunk C, G = in-chunk cumsum of the log-decay g, S0 = state entering the chunk):

    A   = strict_tril((K·e^{G−Gm}) (K·e^{Gm−G})ᵀ)              (pairwise e^{G_s−G_r}, r < s)
    L   = I + Diag(β) A;   U = L⁻¹ Diag(β) V − L⁻¹ Diag(β) (K·e^{G}) S0
    O   = (Q·e^{G}) S0 + tril((Q·e^{G−Gm}) (K·e^{Gm−G})ᵀ) U
    S_C = Diag(e^{G_C}) S0 + (K·e^{G_C−G})ᵀ U

Gm is the middle of the chunk, so each factor's exponent stays within ±(C/2)·|lower bound|
(±40 for C=16, gate ≥ −5) and nothing overflows in fp32. The upper triangle is masked *before*
β multiplies it: masking after would turn a huge-but-finite entry into 0·inf = NaN gradients
(research/default-model.md §5, incident 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers.kda import KimiDeltaAttention, ShortConv, l2_normalize

CHUNK = 16


def chunk_kda_train(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """KDA from a zero state, autograd-friendly. q, k, g [B, T, H, K]; v [B, T, H, V]; beta [B, T, H].

    Returns o [B, T, H, V] in fp32 (float64 for float64 inputs). q and k must be L2-normalised.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = K**-0.5 if scale is None else scale
    pad = (-T) % chunk
    q, k, v, g, beta = (x.to(dt) for x in (q, k, v, g, beta))
    if pad:  # zero k/v/β and zero decay: padded steps leave the state unchanged
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // chunk

    def chunks(x: torch.Tensor) -> torch.Tensor:  # [B, T, H, D] -> [B, H, N, C, D]
        return x.reshape(B, N, chunk, H, x.shape[-1]).permute(0, 3, 1, 2, 4)

    q, k, v, g = chunks(q * scale), chunks(k), chunks(v), chunks(g)
    b = beta.reshape(B, N, chunk, H).permute(0, 3, 1, 2)[..., None]  # [B, H, N, C, 1]
    G = g.cumsum(-2)
    Gm = G[..., chunk // 2 - 1 : chunk // 2, :]
    k_hi, k_lo = k * (G - Gm).exp(), k * (Gm - G).exp()
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    A = (k_hi @ k_lo.transpose(-1, -2)).masked_fill(~strict, 0) * b
    L = A + torch.eye(chunk, dtype=dt, device=q.device)
    W_v = torch.linalg.solve_triangular(L, b * v, upper=False, unitriangular=True)
    W_k = torch.linalg.solve_triangular(L, b * (k * G.exp()), upper=False, unitriangular=True)
    P = ((q * (G - Gm).exp()) @ k_lo.transpose(-1, -2)).masked_fill(~incl, 0)  # [B, H, N, C, C]
    q_g = q * G.exp()
    GC = G[..., -1:, :]
    k_end = k * (GC - G).exp()
    decay_end = GC.exp().transpose(-1, -2)  # [B, H, N, K, 1]
    S = q.new_zeros(B, H, K, V)
    outs = []
    # unbind once: indexing [:, :, n] inside the loop would make autograd build a zero-filled
    # full-size gradient per chunk and per tensor (O(N²) memory traffic in the backward)
    steps = zip(*(x.unbind(2) for x in (W_v, W_k, q_g, P, decay_end, k_end.transpose(-1, -2))))
    for w_v, w_k, q_n, p_n, d_n, k_n in steps:
        U = w_v - w_k @ S
        outs.append(q_n @ S + p_n @ U)
        S = d_n * S + k_n @ U
    o = torch.stack(outs, dim=2)  # [B, H, N, C, V]
    return o.permute(0, 2, 3, 1, 4).reshape(B, N * chunk, H, V)[:, :T]


def short_conv_train(conv: ShortConv, x: torch.Tensor) -> torch.Tensor:
    """`conv(x, None)[0]` as a sum of K shifted, scaled copies of x (fp32, then SiLU).

    Why: on the CPU the depthwise `conv1d` forward and backward took 1.3–2× as long at stage-2
    shapes (`benchmarks/kda_train.py`), and stage 2 runs three of them per KDA layer.
    """
    T, K = x.shape[1], conv.kernel
    xs = F.pad(x.float(), (0, 0, K - 1, 0))  # zero history, as a cache-less forward has
    w = conv.weight.float()[:, 0]  # [C, K]; w[:, K−1] hits the current token
    y = xs[:, K - 1 :] * w[:, K - 1]
    for j in range(K - 1):
        y = torch.addcmul(y, xs[:, j : j + T], w[:, j])
    return F.silu(y).to(x.dtype)


def kda_forward_train(mod: KimiDeltaAttention, x: torch.Tensor) -> torch.Tensor:
    """`mod(x)` without a cache, through `chunk_kda_train` so gradients flow to every parameter.

    Mirrors `KimiDeltaAttention.forward` step for step; tests check the two agree.
    """
    B, T, _ = x.shape
    H, D = mod.H, mod.D
    q = short_conv_train(mod.q_conv1d, mod.q_proj(x))
    k = short_conv_train(mod.k_conv1d, mod.k_proj(x))
    v = short_conv_train(mod.v_conv1d, mod.v_proj(x))
    q = l2_normalize(q.view(B, T, H, D))
    k = l2_normalize(k.view(B, T, H, D))
    v = v.view(B, T, H, D).float()
    g = mod.decay(mod.f_b_proj(mod.f_a_proj(x)).view(B, T, H, D))
    beta = torch.sigmoid(mod.b_proj(x).float())
    with torch.autocast(x.device.type, enabled=False):
        o = chunk_kda_train(q.float(), k.float(), v, g.float(), beta, scale=D**-0.5)
    gate = mod.g_proj(x) if hasattr(mod, "g_proj") else mod.g_b_proj(mod.g_a_proj(x))
    o = mod.o_norm(o, gate.view(B, T, H, D))
    return mod.o_proj(o.to(x.dtype).reshape(B, T, -1))


class TrainableKDA(KimiDeltaAttention):
    """A KDA layer whose cache-less forward is differentiable (same parameters and names).

    With a cache (generation) it runs the engine's fast path, so a trained student can be
    evaluated exactly as the engine will run it.
    """

    def forward(self, x: torch.Tensor, cache=None, start: int = 0) -> torch.Tensor:  # noqa: ANN001
        if cache is None and torch.is_grad_enabled():
            return kda_forward_train(self, x)
        return super().forward(x, cache, start)
