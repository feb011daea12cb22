"""Stage 2's loss with its gradient written out: one pass over the vocabulary, one saved tensor.

`stage2.kd_loss` is the plain reference: KL(teacher‖student), the cross-entropy on the
teacher's argmax and the total variation distance, each a chain of vocabulary-sized autograd
ops. At k3-smol's 49,152-token vocabulary and 2 × 512 positions, that chain's forward and
backward took 1.74 s of an 8–10 s CPU step (session 36, `benchmarks/stage2_profile.py`).

Per position, with student probabilities p = softmax(z), teacher probabilities q, teacher
argmax a and weights λ (top-1) and μ (TVD), the gradients with respect to the student logits z
are known in closed form:

    ∂KL/∂z  = p − q
    ∂CE/∂z  = p − onehot(a)
    ∂TVD/∂z = p ⊙ (g − ⟨p, g⟩),   g = ½·sign(p − q)

so the forward computes the three losses and their weighted gradient together, in place
where it can, and the backward only scales it. Values and gradients match `kd_loss` to fp32
rounding (tests compare both against float64).

Two forms: `fused_kd_loss` takes the logits; `fused_head_kd_loss`, which stage 2 uses, takes
the hidden states and computes the frozen head inside the loss, a few positions at a time, so
the [positions, vocabulary] logits never exist whole (session 37: a CPU step 1.5–1.6× faster).
"""

from __future__ import annotations

import sys

import torch

from ..layers.linear import cpu_bf16_is_slow


def _loss_rows(
    t_logits: torch.Tensor,
    s_logits: torch.Tensor,
    inv_n: torch.Tensor | float,
    top1_weight: float,
    tvd_weight: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(KL, CE, TVD sums over these rows, each × inv_n; the weighted loss's gradient × inv_n)
    for [R, V] logits, one row a scored position. `inv_n` may be a 0-d tensor, so a compiled
    copy does not specialise on each batch's count."""
    t_logp = t_logits.float().log_softmax(-1)
    s_logp = s_logits.float().log_softmax(-1)
    top = t_logp.argmax(-1, keepdim=True)
    t_p = t_logp.exp()
    kl = t_logp.sub_(s_logp).mul_(t_p).sum() * inv_n  # t_logp is spent here
    del t_logp
    ce = -s_logp.gather(-1, top).sum() * inv_n
    p = s_logp.exp_()
    grad = p - t_p  # ∂KL/∂z, and the TVD's argument
    del t_p
    tvd = 0.5 * torch.linalg.vector_norm(grad, ord=1) * inv_n
    if tvd_weight:
        g = grad.sign().mul_(0.5)
        c = torch.linalg.vecdot(p, g).unsqueeze(-1)
        grad.add_(g.sub_(c).mul_(p), alpha=tvd_weight)
        del g
    if top1_weight:
        grad.add_(p, alpha=top1_weight)
        grad.scatter_add_(-1, top, torch.full_like(top, -top1_weight, dtype=grad.dtype))
    return kl, ce, tvd, grad.mul_(inv_n)


class _DistillLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_logits, t_logits, mask, top1_weight, tvd_weight):  # noqa: ANN001, ANN205
        m = mask[:, 1:].bool()
        n = max(int(m.sum()), 1)
        kl, ce, tvd, grad = _loss_rows(
            t_logits[:, :-1][m], s_logits[:, :-1][m], 1.0 / n, top1_weight, tvd_weight
        )
        ctx.save_for_backward(grad, m)
        ctx.shape, ctx.dtype = s_logits.shape, s_logits.dtype
        ctx.mark_non_differentiable(kl, ce, tvd)
        loss = kl + top1_weight * ce + tvd_weight * tvd
        return loss, kl, ce, tvd

    @staticmethod
    def backward(ctx, g_loss, *_):  # noqa: ANN001, ANN205
        grad, m = ctx.saved_tensors
        full = torch.zeros(ctx.shape, dtype=ctx.dtype, device=grad.device)
        full[:, :-1][m] = (grad * g_loss).to(ctx.dtype)
        return full, None, None, None, None


def _fast_heads(head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the head to multiply hidden states by, the head to multiply gradients by).

    On CPUs whose bf16 products are slow (`layers/linear.py`) both are fp32 copies of a bf16
    head (products are rounded back to bf16, as the bf16 kernel's are), made once per step, not
    per chunk; the first is stored column-major, because torch's fp32 product of a 32-row chunk
    by a row-major [V, H] head runs at half the speed (`benchmarks/small_matmul.py`), while the
    gradient's product wants it row-major. Elsewhere both are the head itself."""
    if head.device.type == "cpu" and head.dtype == torch.bfloat16 and cpu_bf16_is_slow():
        w = head.float()
        return w.t().contiguous().t(), w
    return head, head


def _head_product(h: torch.Tensor, head: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`h @ headᵀ` in `head`'s dtype, multiplied by `w` (`_fast_heads(head)[0]`)."""
    return (h.to(head.dtype).to(w.dtype) @ w.t()).to(head.dtype)


class _HeadDistillLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_h, t_h, s_head, t_head, top1_weight, tvd_weight, rows, compiled):  # noqa: ANN001, ANN205
        inv_n = torch.tensor(1.0 / max(s_h.shape[0], 1), device=s_h.device)
        d_h = torch.empty(s_h.shape, dtype=s_head.dtype, device=s_h.device)
        sums = torch.zeros(3, dtype=torch.float32, device=s_h.device)
        (s_w, s_grad_w), (t_w, _) = _fast_heads(s_head), _fast_heads(t_head)
        for i in range(0, s_h.shape[0], rows):
            s_z = _head_product(s_h[i : i + rows], s_head, s_w)
            t_z = _head_product(t_h[i : i + rows], t_head, t_w)
            full = compiled and s_z.shape[0] == rows  # one static shape: one compilation
            loss_rows = COMPILED_ROWS if full else _loss_rows
            kl, ce, tvd, grad = loss_rows(t_z, s_z, inv_n, top1_weight, tvd_weight)
            sums += torch.stack([kl, ce, tvd])
            g = grad.to(s_head.dtype).to(s_grad_w.dtype)
            if s_grad_w.dtype == d_h.dtype:
                torch.mm(g, s_grad_w, out=d_h[i : i + rows])
            else:
                d_h[i : i + rows] = torch.mm(g, s_grad_w)
        ctx.save_for_backward(d_h)
        ctx.dtype = s_h.dtype
        kl, ce, tvd = sums.unbind()
        ctx.mark_non_differentiable(kl, ce, tvd)
        loss = kl + top1_weight * ce + tvd_weight * tvd
        return loss, kl, ce, tvd

    @staticmethod
    def backward(ctx, g_loss, *_):  # noqa: ANN001, ANN205
        (d_h,) = ctx.saved_tensors
        return (d_h * g_loss).to(ctx.dtype), None, None, None, None, None, None, None


class _CompiledRows:
    """`_loss_rows` compiled by Inductor (fused C++ loops: each chunk's dozen passes over the
    vocabulary become a few), used for full CPU chunks. Compiled once per process and pair of
    loss weights (about 30 s the first time; torch caches the code on disk). Where it cannot be
    built (no C++ compiler, an unsupported platform) it says so once and stays eager: same
    results, only slower."""

    def __init__(self) -> None:
        self.fn = None
        self.failed = False

    def __call__(self, *args):  # noqa: ANN002, ANN204
        if not self.failed:
            try:
                if self.fn is None:
                    self.fn = torch.compile(_loss_rows, dynamic=False)
                return self.fn(*args)
            except Exception as e:  # noqa: BLE001 - any failure to build leaves the eager path
                self.failed = True
                print(f"k3chat: compiled stage-2 loss unavailable, using eager ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''})", file=sys.stderr)  # fmt: skip
        return _loss_rows(*args)


COMPILED_ROWS = _CompiledRows()


def fused_kd_loss(
    t_logits: torch.Tensor,
    s_logits: torch.Tensor,
    mask: torch.Tensor,
    top1_weight: float = 0.0,
    tvd_weight: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, KL, top-1 CE, TVD): loss = KL + `top1_weight`·CE + `tvd_weight`·TVD, each the mean
    over positions whose next token is in `mask`, as `stage2.kd_loss` computes them; only the
    loss carries a gradient (to `s_logits`)."""
    return _DistillLoss.apply(s_logits, t_logits.detach(), mask, top1_weight, tvd_weight)


COMPILE_MIN_VOCAB = 8192
"""Below this the loss's passes are cheap and a compilation (seconds, per shape) is not repaid:
tiny test models stay eager."""

HEAD_ROWS_CPU = 32
"""Positions per chunk on the CPU: a chunk's few [rows, V] fp32 tensors (6 MB each at k3-smol's
vocabulary) stay in the last-level cache through the loss's dozen passes."""


def fused_head_kd_loss(
    t_hidden: torch.Tensor,
    s_hidden: torch.Tensor,
    mask: torch.Tensor,
    t_head: torch.Tensor,
    s_head: torch.Tensor,
    top1_weight: float = 0.0,
    tvd_weight: float = 0.0,
    rows: int | None = None,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`fused_kd_loss` of the logits `hidden @ headᵀ`, without ever holding them whole.

    Why: at 2 × 512 positions and 49,152 tokens each [positions, V] tensor is 200 MB in fp32,
    and the loss makes a dozen passes over them; chunk by chunk those passes hit the cache, the
    logits of unscored positions are never computed, and the backward keeps only the
    [positions, hidden] gradient. `s_head` must be frozen (its gradient is not computed); the
    student's logits are computed in `s_head`'s dtype (bf16 under stage 2's autocast), the
    teacher's in `t_head`'s. Hidden states are [B, T, H]; the gradient flows to `s_hidden`.
    `compiled`: on the CPU, full chunks go through `COMPILED_ROWS`, for vocabularies of at least
    `COMPILE_MIN_VOCAB` tokens; elsewhere it is ignored.
    """
    if s_head.requires_grad:
        raise ValueError("fused_head_kd_loss computes no gradient for the head; it must be frozen")
    m = mask[:, 1:].bool().to(s_hidden.device)
    on_cpu = s_hidden.device.type == "cpu"
    rows = rows or (HEAD_ROWS_CPU if on_cpu else 4096)
    compiled = compiled and on_cpu and s_head.shape[0] >= COMPILE_MIN_VOCAB
    t_rows, s_rows = t_hidden.detach()[:, :-1][m], s_hidden[:, :-1][m]
    return _HeadDistillLoss.apply(
        s_rows, t_rows, s_head.detach(), t_head.detach(), top1_weight, tvd_weight, rows, compiled
    )
