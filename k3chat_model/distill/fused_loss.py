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
"""

from __future__ import annotations

import torch


class _DistillLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_logits, t_logits, mask, top1_weight, tvd_weight):  # noqa: ANN001, ANN205
        m = mask[:, 1:].bool()
        n = max(int(m.sum()), 1)
        t_logp = t_logits[:, :-1][m].float().log_softmax(-1)
        s_logp = s_logits[:, :-1][m].float().log_softmax(-1)
        top = t_logp.argmax(-1, keepdim=True)
        t_p = t_logp.exp()
        kl = t_logp.sub_(s_logp).mul_(t_p).sum() / n  # t_logp is spent here
        del t_logp
        ce = -s_logp.gather(-1, top).sum() / n
        p = s_logp.exp_()
        grad = p - t_p  # ∂KL/∂z, and the TVD's argument
        del t_p
        tvd = 0.5 * torch.linalg.vector_norm(grad, ord=1) / n
        if tvd_weight:
            g = grad.sign().mul_(0.5)
            c = torch.linalg.vecdot(p, g).unsqueeze(-1)
            grad.add_(g.sub_(c).mul_(p), alpha=tvd_weight)
            del g
        if top1_weight:
            grad.add_(p, alpha=top1_weight)
            grad.scatter_add_(-1, top, torch.full_like(top, -top1_weight, dtype=grad.dtype))
        grad.div_(n)
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
