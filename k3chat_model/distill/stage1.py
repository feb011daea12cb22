"""Stage 1: every student KDA layer learns its teacher layer's attention output.

One teacher pass (no grad, teacher dtype) captures each layer's normed attention input and its
attention output; each student layer is fed that input (teacher forcing) and trained on the
relative MSE ‖ŷ − y‖² / ‖y‖². Layers are independent, so all train at once from one pass:
backward and clipping per layer, then one AdamW step. A layer whose gradient is non-finite
skips that update.

With `context` (KDA layers already in the hybrid a growth run joins), the pass runs with them
swapped in: each new layer then learns what the teacher's softmax attention does on the stream
it will see in that hybrid, not on the all-softmax teacher's (session 20).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..model import K3ForCausalLM
from . import ckpt
from .kda_train import TrainableKDA, kda_forward_train
from .metrics import swapped


@dataclass
class Stage1Config:
    tokens: int
    batch: int = 4
    lr: float = 1e-3
    warmup_steps: int = 10
    min_lr_frac: float = 0.05
    clip: float = 1.0
    ckpt_seconds: float = 240.0


def lr_at(step: int, total_steps: int, cfg_lr: float, warmup: int, min_frac: float) -> float:
    """Linear warm-up, then cosine from `cfg_lr` down to `min_frac`·`cfg_lr` at `total_steps`."""
    if step < warmup:
        return cfg_lr * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return cfg_lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p)))


class _Captured(Exception):
    """Raised by the last capture hook: the layers above it are not needed."""


@torch.no_grad()
def capture(
    teacher: K3ForCausalLM, ids: torch.Tensor, layers: list[int]
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Teacher-forced (attention input, attention output) per layer, as fp32.

    The pass stops at the last requested layer: a growth run trains one layer of 30, and
    running the teacher's layers above it would be wasted work.
    """
    return capture_stream(teacher, ids, layers)


def capture_stream(
    teacher: K3ForCausalLM, ids: torch.Tensor, layers: list[int]
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """`capture` under the caller's grad mode: differentiable where the caller trains (1w)."""
    got: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    last = max(layers)
    hooks = []
    for i in layers:

        def hook(_m, args, out, i=i):  # noqa: ANN001
            got[i] = (args[0].float(), out.float())
            if i == last:
                raise _Captured

        hooks.append(teacher.model.layers[i].self_attn.register_forward_hook(hook))
    try:
        teacher.model(ids)
    except _Captured:
        pass
    finally:
        for h in hooks:
            h.remove()
    return got


def train_stage1(
    teacher: K3ForCausalLM,
    students: dict[int, TrainableKDA],
    rows: torch.Tensor,
    cfg: Stage1Config,
    ckpt_path: Path,
    log_path: Path | None = None,
    stop: ckpt.StopFlag | None = None,
    name: str = "stage1",
    context: dict[int, torch.nn.Module] | None = None,
) -> dict:
    """Train `students` in place until `cfg.tokens` have been seen; resumes from `ckpt_path`.
    `context`: KDA layers swapped into the teacher's pass (see the module docstring).

    Returns the final state dict {"step", "tokens", "cursor", "done", "loss"}.
    """
    layers = sorted(students)
    if set(context or {}) & set(layers):
        raise ValueError(
            f"layers {sorted(set(context) & set(layers))} are both trained and context"
        )
    params = [p for i in layers for p in students[i].parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    state = {"step": 0, "tokens": 0, "cursor": 0, "done": False, "loss": {}}
    saved = ckpt.load(ckpt_path)
    if saved is not None:
        for i in layers:
            students[i].load_state_dict(saved["layers"][i])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
    seq = rows.shape[1]
    step_tokens = cfg.batch * seq
    total_steps = max(1, math.ceil(cfg.tokens / step_tokens))
    prog = ckpt.Progress(name, total_steps * step_tokens, state["tokens"], log_path)

    def save() -> None:
        ckpt.save_training(ckpt_path, students, layers, opt, state)

    last_save = time.time()
    for m in students.values():
        m.train()
    dtype = teacher.model.embed_tokens.weight.dtype
    with swapped(teacher, context or {}, dtype):
        while state["step"] < total_steps and not (stop and stop.stop):
            idx = [(state["cursor"] + j) % len(rows) for j in range(cfg.batch)]
            ids = rows[idx].long()
            got = capture(teacher, ids, layers)
            lr = lr_at(state["step"], total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_frac)
            for gr in opt.param_groups:
                gr["lr"] = lr
            opt.zero_grad(set_to_none=True)
            losses, skipped = {}, 0
            for i in layers:
                x, y = got[i]
                y_hat = kda_forward_train(students[i], x)
                loss = (y_hat - y).pow(2).sum() / y.pow(2).sum().clamp_min(1e-12)
                loss.backward()
                ps = list(students[i].parameters())
                norm = torch.nn.utils.clip_grad_norm_(ps, cfg.clip)
                if not torch.isfinite(norm):
                    skipped += 1
                    for p in ps:
                        p.grad = None
                losses[i] = loss.item()
            opt.step()
            state["step"] += 1
            state["tokens"] += step_tokens
            state["cursor"] = (state["cursor"] + cfg.batch) % len(rows)
            state["loss"] = losses
            prog.step(
                state["tokens"],
                step=state["step"],
                lr=lr,
                rel_mse=sum(losses.values()) / len(losses),
                skipped=skipped,
            )
            if time.time() - last_save > cfg.ckpt_seconds:
                save()
                last_save = time.time()
    state["done"] = state["step"] >= total_steps
    save()
    return state
