"""Stage 1w: new KDA layers learn what the layers above them need, not only their own output.

Stage 1 fits a new layer to the teacher's attention output by relative MSE, every direction
of the error weighted alike. The error then passes through the layers above it (in a grown
hybrid some of them KDA, trained around the softmax layer being replaced), and what reaches
the logits depends on them: some directions die out, others grow. Stage 2 measures that at
the logits, but on the CPU it runs at ~125 tokens/s and was flat for one new layer in 0.5M
tokens (sessions 14, 15, 35).

1w sits between them: block reconstruction, as post-training quantisation does it. With every
other weight frozen, the new layers train so that the token-mixer inputs of the `span` layers
above each of them match the *reference*: the hybrid the run grows from (the `--init-from` layers swapped in, softmax attention still at the new layers), which
passed the gate. The pass stops at the highest point and never computes the logits.

The result replaces the new layers in `stage1b.pt` (the old file is kept as
`stage1b-prewindow.pt`), so `timed` and `run`'s stage 2 start from it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import ConfigError
from ..model import K3ForCausalLM
from . import ckpt
from .hybrid import kda_config
from .kda_train import TrainableKDA
from .metrics import swapped
from .stage1 import Stage1Config, capture, capture_stream, lr_at


@dataclass
class WindowConfig(Stage1Config):
    """Stage 1's schedule and checkpointing, a lower peak LR (it continues trained layers)."""

    lr: float = 3e-4
    min_lr_frac: float = 0.1
    span: int = 6
    """Layers above each new one whose token-mixer input is matched."""
    adapt_scale: float = 0.0
    """LR multiplier of the context layers inside the window (between a new layer and the
    highest point), which then adapt around it as block reconstruction lets a whole block
    move; 0 keeps them frozen."""


def window_points(new: list[int], span: int, n_layers: int) -> list[int]:
    """Layers whose token-mixer input is matched: the `span` above each new layer."""
    return sorted({j for i in new for j in range(i + 1, min(i + span, n_layers - 1) + 1)})


def rel_mse(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (y_hat.float() - y).pow(2).sum() / y.pow(2).sum().clamp_min(1e-12)


def window_loss(
    got: dict[int, tuple[torch.Tensor, torch.Tensor]],
    ref: dict[int, tuple[torch.Tensor, torch.Tensor]],
    points: list[int],
) -> torch.Tensor:
    """Mean relative MSE of the token-mixer inputs at `points`.

    The new layers' own outputs are not a term: on the 13-layer run their relative error
    was 0.11 where the inputs above read 0.001–0.0035, so it would outweigh every point and
    the loss would be stage 1's again.
    """
    return torch.stack([rel_mse(got[p][0], ref[p][0]) for p in points]).mean()


def _with_students(model: K3ForCausalLM, students: dict[int, nn.Module]) -> dict[int, nn.Module]:
    """Put the trainable modules themselves (not copies) in; returns the replaced ones."""
    old = {i: model.model.layers[i].self_attn for i in students}
    for i, mod in students.items():
        model.model.layers[i].self_attn = mod
    return old


def train_window(
    model: K3ForCausalLM,
    students: dict[int, TrainableKDA],
    context: dict[int, nn.Module],
    rows: torch.Tensor,
    cfg: WindowConfig,
    ckpt_path: Path,
    log_path: Path | None = None,
    stop: ckpt.StopFlag | None = None,
    adapt: dict[int, TrainableKDA] | None = None,
) -> dict:
    """Train `students` (new layers, fp32) in place inside `model` (the frozen teacher, with
    `context` swapped in) until `cfg.tokens`; resumes from `ckpt_path`. `adapt`: context layers
    (fp32 trainable copies) that train too, at `cfg.adapt_scale` × the LR; the reference keeps
    their weights as they were on entry. Returns the state {"step", "tokens", "cursor",
    "done", "loss"}."""
    new = sorted(students)
    adapt = adapt or {}
    if overlap := sorted(set(context) & set(new)):
        raise ValueError(f"layers {overlap} are both trained and context")
    if stray := sorted(set(adapt) - set(context)):
        raise ValueError(f"adapted layers {stray} are not context layers")
    live = students | adapt
    n_layers = len(model.model.layers)
    points = window_points(new, cfg.span, n_layers)
    if not points:
        raise ConfigError(f"no layer above {new} to match", hint="1w needs --span 1 or more")
    model.requires_grad_(False)
    groups = [(1.0, [p for i in new for p in students[i].parameters()])]
    if adapt:
        groups.append((cfg.adapt_scale, [p for i in sorted(adapt) for p in adapt[i].parameters()]))
    params = [p for _, ps in groups for p in ps]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(
        [{"params": ps, "scale": scale} for scale, ps in groups],
        lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0,
    )  # fmt: skip
    state = {"step": 0, "tokens": 0, "cursor": 0, "done": False, "loss": None}
    if (saved := ckpt.load(ckpt_path)) is not None:
        if set(saved["layers"]) != set(live):
            raise ConfigError(
                f"{ckpt_path} trains layers {sorted(saved['layers'])}, this run {sorted(live)}",
                hint=f"finish it with its own settings, or delete {ckpt_path} to start over",
            )
        for i, mod in live.items():
            mod.load_state_dict(saved["layers"][i])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
    step_tokens = cfg.batch * rows.shape[1]
    total_steps = max(1, math.ceil(cfg.tokens / step_tokens))
    prog = ckpt.Progress("window", total_steps * step_tokens, state["tokens"], log_path)

    def save() -> None:
        ckpt.save_training(ckpt_path, live, sorted(live), opt, state)

    last_save = time.time()
    dtype = model.model.embed_tokens.weight.dtype
    device = params[0].device
    for m in live.values():
        m.train()
    with swapped(model, context, dtype):
        while state["step"] < total_steps and not (stop and stop.stop):
            idx = [(state["cursor"] + j) % len(rows) for j in range(cfg.batch)]
            ids = rows[idx].long().to(device)
            ref = capture(model, ids, points)  # the reference: softmax still at `new`
            lr = lr_at(state["step"], total_steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_frac)
            for gr in opt.param_groups:
                gr["lr"] = lr * gr["scale"]
            opt.zero_grad(set_to_none=True)
            old = _with_students(model, live)
            try:
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    got = capture_stream(model, ids, points)
            finally:
                _with_students(model, old)
            loss = window_loss(got, ref, points)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            if torch.isfinite(norm):
                opt.step()
            state["step"] += 1
            state["tokens"] += step_tokens
            state["cursor"] = (state["cursor"] + cfg.batch) % len(rows)
            state["loss"] = loss.item()
            prog.step(
                state["tokens"], step=state["step"], lr=lr, rel_mse=state["loss"],
                skipped=int(not torch.isfinite(norm)),
            )  # fmt: skip
            if time.time() - last_save > cfg.ckpt_seconds:
                save()
                last_save = time.time()
    state["done"] = state["step"] >= total_steps
    save()
    return state


def window_run(
    run: Path, cfg: WindowConfig, stop: ckpt.StopFlag | None = None, threads: int | None = None
) -> dict:
    """1w on a run stopped after stage 1b (`run --until stage1b`); on completion its new layers
    replace those in `stage1b.pt`. Resumable; a finished one only re-applies its result."""
    from .data import interleave
    from .pipeline import _log, load_run, run_teacher

    rcfg, st = load_run(run)
    if "stage1b" not in st.get("done", []):
        raise ConfigError(
            f"{run}: stage 1b is not done", hint="run `distill run RUN --until stage1b`"
        )
    if (run / "stage2.pt").exists():
        raise ConfigError(
            f"{run}: stage 2 has started from the current stage1b.pt",
            hint="1w feeds stage 2: use it on a run stopped with --until stage1b",
        )
    torch.set_num_threads(threads or rcfg.threads)
    torch.manual_seed(0)
    new = [i for i in st["chosen"] if i not in st.get("pretrained", [])]
    if not new:
        raise ConfigError(f"{run}: no new KDA layers (every layer came from --init-from)")
    _, _, model = run_teacher(run)
    b1 = ckpt.load(run / "stage1b.pt")
    if (prior := ckpt.load(run / "stage1b-prewindow.pt")) is not None:
        b1 = prior  # a finished or resumed 1w starts from the stage 1b it replaced
    kcfg = kda_config(model.config, list(range(model.config.num_hidden_layers)))
    mods: dict[int, TrainableKDA] = {}
    for i, sd in b1["layers"].items():
        mod = TrainableKDA(kcfg, i).float()
        mod.load_state_dict(sd)
        mods[i] = mod
    students = {i: mods[i] for i in new}
    context = {i: m for i, m in mods.items() if i not in new}
    top = max(window_points(new, cfg.span, model.config.num_hidden_layers), default=-1)
    adapt = {i: m for i, m in context.items() if min(new) < i < top} if cfg.adapt_scale else {}
    d = torch.load(run / "data" / "rows.pt")
    rows = interleave(d["chat"][0], d["assist"][0], every=2)
    s = train_window(model, students, context, rows, cfg, run / "window.pt",
                     run / "train_log.jsonl", stop, adapt)  # fmt: skip
    if not s["done"]:
        return s
    if not (run / "stage1b-prewindow.pt").exists():
        ckpt.copy_atomic(run / "stage1b.pt", run / "stage1b-prewindow.pt")
    out = dict(b1)
    trained = students | adapt
    out["layers"] = {i: (trained[i].state_dict() if i in trained else sd)
                     for i, sd in b1["layers"].items()}  # fmt: skip
    ckpt.save_atomic(out, run / "stage1b.pt")
    st["window_tokens"] = s["tokens"]
    ckpt.write_json(run / "state.json", st)
    _log(run, f"window: {s['tokens']} tokens, span {cfg.span}, layers {new} "
         f"(adapted {sorted(adapt)} at {cfg.adapt_scale}x) -> stage1b.pt")  # fmt: skip
    return s
