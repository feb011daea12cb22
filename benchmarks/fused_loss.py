"""Stage 2's fused losses against the autograd reference (`stage2.kd_loss`): the head and
loss alone, and whole CPU stage-2 steps, side by side in one process. `fused_kd_loss` takes the
logits; `fused_head_kd_loss` (stage 2's default since session 37) takes the hidden states and
computes the head chunk by chunk, optionally with the loss's chunks compiled by Inductor
(stage 2's default on the CPU since session 37). On CPUs without native bf16 a last case
multiplies by the row-major fp32 head that stage 2 used before session 54 (`_fast_heads` now
gives the hidden-state products a column-major copy); elsewhere it times the same code.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/fused_loss.py ~/.cache/k3chat/models/k3-smol-teacher

Both at k3-smol's vocabulary, batch 2 × 512, top-1 weight 0.5 and TVD weight 1 (the CPU recipe
since session 29). Alternates the two, medians; prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
from stage2_step import hybrid_pair, step_seconds

from k3chat_model.distill import fused_loss, stage2
from k3chat_model.distill.fused_loss import fused_head_kd_loss, fused_kd_loss


def reference_loss(t_logits, s_logits, mask, top1_weight, tvd_weight):  # noqa: ANN001, ANN201
    """`fused_kd_loss`'s contract built from the plain autograd `kd_loss`."""
    kl, ce, tv = stage2.kd_loss(t_logits, s_logits, mask, tvd=bool(tvd_weight))
    loss = kl + top1_weight * ce + (tvd_weight * tv if tv is not None else 0.0)
    return loss, kl, ce, tv if tv is not None else kl.new_zeros(())


def loss_seconds(name: str, fn, t_h, base, mask, head) -> float:  # noqa: ANN001
    """Head and loss, forward and backward, from the hidden states as a step runs them."""
    s = base.clone().requires_grad_(True)
    start = time.perf_counter()
    if name in (HEAD_FUSED, COMPILED, ROW_MAJOR):
        compiled = name != HEAD_FUSED
        loss, *_ = fused_head_kd_loss(t_h, s, mask, head, head, 0.5, 1.0, compiled=compiled)
    else:
        with torch.no_grad():
            t_logits = t_h @ head.t()
        loss, *_ = fn(t_logits, s @ head.t(), mask, 0.5, 1.0)
    loss.backward()
    return time.perf_counter() - start


HEAD_FUSED = "fused with the head"
COMPILED = "fused with the head, compiled"
ROW_MAJOR = "fused with the head, compiled, row-major fp32 head where bf16 is slow (before s54)"
SHORT = {"reference": "reference (autograd)", "fused": "fused", "head": HEAD_FUSED,
         "compiled": COMPILED, "row-major": ROW_MAJOR}  # fmt: skip


@contextlib.contextmanager
def row_major_heads(on: bool):  # noqa: ANN201
    """`fused_loss._fast_heads` as before session 54: one row-major fp32 copy for both products."""
    fast = fused_loss._fast_heads

    def row_major(head):  # noqa: ANN001, ANN202
        w = fast(head)[1]
        return w, w

    fused_loss._fast_heads = row_major if on else fast
    try:
        yield
    finally:
        fused_loss._fast_heads = fast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="teacher-equivalent k3-smol checkpoint dir")
    ap.add_argument("--kda", default="4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="loss timings and steps per case")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the step cases")
    ap.add_argument("--cases", default=",".join(SHORT), help=f"subset of {','.join(SHORT)}")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    layers = [int(x) for x in a.kda.split(",") if x]
    teacher, student, kda = hybrid_pair(a.teacher, layers)
    vocab = student.config.vocab_size
    g = torch.Generator().manual_seed(0)
    hidden = student.config.hidden_size
    t_h = torch.randn(2, 512, hidden, generator=g).bfloat16()
    base = torch.randn(2, 512, hidden, generator=g).bfloat16()
    head = student.lm_head.weight.detach()
    mask = torch.ones(2, 512)
    rows = torch.randint(0, vocab, (2, 512), generator=g)

    every = {
        "reference (autograd)": reference_loss,
        "fused": fused_kd_loss,
        HEAD_FUSED: fused_kd_loss,
        COMPILED: fused_kd_loss,
        ROW_MAJOR: fused_kd_loss,
    }
    chosen = {SHORT[c] for c in a.cases.split(",") if c}
    cases = {k: v for k, v in every.items() if k in chosen}
    loss_t: dict[str, list[float]] = {k: [] for k in cases}
    for name, fn in cases.items():
        with row_major_heads(name == ROW_MAJOR):
            loss_seconds(name, fn, t_h, base, mask, head)  # warm-up
    for _ in range(a.repeats):
        for name, fn in cases.items():
            with row_major_heads(name == ROW_MAJOR):
                loss_t[name].append(loss_seconds(name, fn, t_h, base, mask, head))
    step_t: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(a.rounds):
        for name, fn in cases.items():
            stage2.fused_kd_loss = fn  # what train_stage2 calls on the logits path
            stage2.FUSE_HEAD = name in (HEAD_FUSED, COMPILED, ROW_MAJOR)
            with row_major_heads(name == ROW_MAJOR):
                step_t[name].append(step_seconds(teacher, student, kda, layers, rows, a.repeats,
                                                 1.0, name in (COMPILED, ROW_MAJOR)))  # fmt: skip
    stage2.fused_kd_loss, stage2.FUSE_HEAD = fused_kd_loss, True

    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
        f"torch {torch.__version__}, {platform.machine()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    print(f"vocab {vocab}; batch 2 x 512; KDA layers {layers}, all training; medians\n")
    print("| loss | head + loss fwd + bwd, s | stage-2 step, s | step tok/s |\n|---|---|---|---|")
    for name in cases:
        step = statistics.median(step_t[name])
        print(
            f"| {name} | {statistics.median(loss_t[name]):.3f} | {step:.2f} | {1024 / step:.0f} |"
        )


if __name__ == "__main__":
    main()
