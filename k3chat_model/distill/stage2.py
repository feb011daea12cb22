"""Stage 2: logit distillation of the chosen hybrid (KL(teacher‖student) over the full vocab).

The student is a copy of the teacher with the chosen layers replaced by their stage-1 KDA
layers. Only the KDA parameters train (so the shipped delta is just those layers); everything
else stays frozen in the teacher's dtype and the forward runs under bf16 autocast, with the
delta-rule core itself in fp32.

The loss is KL(teacher‖student) plus, optionally, `top1_weight` × cross-entropy on the
teacher's argmax token. Why: greedy decoding (and the gate's factual and top-1 checks) follows
the argmax, and KL alone leaves near-ties to chance: where the teacher's first tokens are nearly
tied ("The" vs "Il" for Italy's capital), a student within its KL may pick either. For one
position the mixed loss is minimised by s = (t + λ·onehot(argmax t)) / (1 + λ): the teacher's
distribution, nudged so its top token wins ties, at a small KL cost (≈0.014 nats at a 50/50 tie
for λ = 0.2).

`tvd_weight` adds the total variation distance ½·Σ|t − s|. Why: it bounds top-1 agreement
directly (where TVD < half the teacher's top-1 margin the argmaxes must agree), while forward KL
also spends the student's capacity on the teacher's tail, which greedy decoding never reads.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import ConfigError
from ..model import K3ForCausalLM
from . import ckpt
from .experts import load_routed, routed_params
from .fused_loss import fused_head_kd_loss, fused_kd_loss
from .kda_train import TrainableKDA
from .stage1 import lr_at

FUSE_HEAD = True
"""Compute the head and the loss together (`fused_head_kd_loss`); benchmarks turn it off to
time the logits path it replaced."""


@dataclass
class Stage2Config:
    tokens: int
    batch: int = 2
    lr: float = 3e-4
    warmup_steps: int = 10
    min_lr_frac: float = 0.1
    clip: float = 1.0
    ckpt_seconds: float = 240.0
    top1_weight: float = 0.0
    """Weight of the cross-entropy on the teacher's argmax token, added to the KL."""
    tvd_weight: float = 0.0
    """Weight of the total variation distance to the teacher, added to the KL."""
    rewarm_tokens: int = 0
    """Tokens at which a reopened (extended) run resumed: the schedule restarts there (warm-up to
    `lr`, cosine to its floor at `tokens`), since the old one had already decayed."""
    lr_scale: dict[int, float] = field(default_factory=dict)
    """Per-layer multiplier of `lr` (default 1): e.g. lower for layers adapted already. 0
    freezes a layer: it keeps its weights, and autograd then starts at the lowest layer that
    trains, so the backward skips every layer below it."""
    expert_lr_scale: float = 1.0
    """Multiplier of `lr` for the routed experts that train (`experts.py`)."""
    compile_loss: bool = False
    """Run the loss's full CPU chunks through Inductor (`fused_loss.COMPILED_ROWS`): the CLI's
    CPU runs do; tests keep it off, where each new shape would compile again."""


def kd_loss(
    t_logits: torch.Tensor, s_logits: torch.Tensor, mask: torch.Tensor, *, tvd: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Mean KL(teacher‖student), mean cross-entropy of the student on the teacher's argmax token
    and (if `tvd`) mean total variation distance, over positions whose next token is in `mask`.
    The plain reference of `fused_loss.fused_kd_loss`, which training uses; float64 logits are
    kept in float64 (tests), anything else is computed in fp32."""

    def up(x: torch.Tensor) -> torch.Tensor:
        return x if x.dtype == torch.float64 else x.float()

    m = mask[:, 1:].bool()
    t = up(t_logits[:, :-1][m]).log_softmax(-1)
    s = up(s_logits[:, :-1][m]).log_softmax(-1)
    t_p = t.exp()
    kl = (t_p * (t - s)).sum(-1).mean()
    ce = -s.gather(-1, t.argmax(-1, keepdim=True)).mean()
    tv = 0.5 * (t_p - s.exp()).abs().sum(-1).mean() if tvd else None
    return kl, ce, tv


def train_stage2(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    students: dict[int, TrainableKDA],
    rows: torch.Tensor,
    mask: torch.Tensor,
    cfg: Stage2Config,
    ckpt_path: Path,
    log_path: Path | None = None,
    stop: ckpt.StopFlag | None = None,
    on_step: Callable[[dict], None] | None = None,
    experts: dict[int, torch.nn.Module] | None = None,
) -> dict:
    """Train the KDA layers of `student` (which holds `students`) until `cfg.tokens`; resumable.

    Runs on the student's device (bf16 autocast there); `rows`/`mask` may stay on the CPU.
    `on_step(state)` is called after every step (e.g. to evaluate or snapshot).
    `experts` (`{layer: block_sparse_moe}` inside `student`, from `experts.prepare`): routed
    experts that train too, at `cfg.expert_lr_scale` × the LR, and are checkpointed with the
    KDA layers.
    """
    experts = experts or {}
    layers = sorted(students)
    student.requires_grad_(False)
    groups: dict[float, list[torch.nn.Parameter]] = {}
    for i in (i for i in layers if cfg.lr_scale.get(i, 1.0) > 0):
        students[i].requires_grad_(True).train()
        groups.setdefault(cfg.lr_scale.get(i, 1.0), []).extend(students[i].parameters())
    if experts and cfg.expert_lr_scale > 0:
        group = groups.setdefault(cfg.expert_lr_scale, [])
        for moe in experts.values():
            for p in routed_params(moe).values():
                group.append(p.requires_grad_(True))
    if not groups:
        raise ConfigError(
            "stage 2 has no layer to train: every layer's LR scale is 0",
            hint="every layer of this run came trained from --init-from; give them a "
            "--stage2-pretrained-lr-scale (timed: --pretrained-lr-scale) above 0",
        )
    params = [p for g in groups.values() for p in g]
    opt = torch.optim.AdamW(
        [{"params": g, "scale": scale} for scale, g in groups.items()],
        lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0,
    )  # fmt: skip
    state = {"step": 0, "tokens": 0, "cursor": 0, "done": False, "loss": None}
    saved = ckpt.load(ckpt_path)
    if saved is not None:
        for i in layers:
            students[i].load_state_dict(saved["layers"][i])
        for i, moe in experts.items():
            if i in saved.get("experts", {}):
                load_routed(moe, saved["experts"][i])
        if saved["opt"] is not None:  # None: weights only (e.g. brought back from a GPU run)
            _load_optimizer(opt, saved["opt"], list(groups))
        state = saved["state"]
    step_tokens = cfg.batch * rows.shape[1]
    total_steps = max(1, math.ceil(cfg.tokens / step_tokens))
    state["done"] = state["step"] >= total_steps  # a reopened run's checkpoints are not done
    # A reopened run restarts the schedule (warm-up, then cosine) over its new tokens only.
    restart = min(cfg.rewarm_tokens // step_tokens, state["step"], total_steps - 1)
    prog = ckpt.Progress("stage2", total_steps * step_tokens, state["tokens"], log_path)

    def save() -> None:
        ckpt.save_training(ckpt_path, students, layers, opt, state, experts)

    device = params[0].device
    fused_head = FUSE_HEAD and not student.lm_head.weight.requires_grad  # else logits, then loss
    last_save = time.time()
    ema = None
    while state["step"] < total_steps and not (stop and stop.stop):
        idx = [(state["cursor"] + j) % len(rows) for j in range(cfg.batch)]
        ids, m = rows[idx].long().to(device), mask[idx].to(device)
        with torch.no_grad():
            t_out = teacher.model(ids) if fused_head else teacher(ids).logits
        lr = lr_at(
            state["step"] - restart,
            total_steps - restart,
            cfg.lr,
            cfg.warmup_steps,
            cfg.min_lr_frac,
        )
        for gr in opt.param_groups:
            gr["lr"] = lr * gr["scale"]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            s_out = student.model(ids) if fused_head else student(ids).logits
        if fused_head:  # the head's mm in bf16, as autocast would run it
            s_head = student.lm_head.weight.to(torch.bfloat16)
            loss, kl, ce, tvd = fused_head_kd_loss(
                t_out, s_out, m, teacher.lm_head.weight, s_head, cfg.top1_weight, cfg.tvd_weight,
                compiled=cfg.compile_loss,
            )  # fmt: skip
        else:
            loss, kl, ce, tvd = fused_kd_loss(t_out, s_out, m, cfg.top1_weight, cfg.tvd_weight)
        del s_out
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        if torch.isfinite(norm):
            opt.step()
        state["step"] += 1
        state["tokens"] += step_tokens
        state["cursor"] = (state["cursor"] + cfg.batch) % len(rows)
        lv = kl.item()
        ema = lv if ema is None else 0.9 * ema + 0.1 * lv
        state["loss"] = ema
        prog.step(
            state["tokens"],
            step=state["step"],
            lr=lr,
            kl=lv,
            kl_ema=ema,
            top1_ce=ce.item(),
            skipped=int(not torch.isfinite(norm)),
            **({"tvd": tvd.item()} if cfg.tvd_weight else {}),
        )
        if on_step:
            on_step(state)
        if time.time() - last_save > cfg.ckpt_seconds:
            save()
            last_save = time.time()
    state["done"] = state["step"] >= total_steps
    save()
    return state


def _load_optimizer(opt: torch.optim.Optimizer, saved: dict, scales: list[float]) -> None:
    """Resume AdamW's moments; the per-group `scale` always comes from the current config. A
    checkpoint grouped differently (its `lr_scale` changed) restarts the moments instead."""
    try:
        opt.load_state_dict(saved)
    except ValueError as e:
        print(f"stage2: optimizer state not resumed ({e}); AdamW restarts", file=sys.stderr)
    for group, scale in zip(opt.param_groups, scales, strict=True):
        group["scale"] = scale
