"""Where one CPU stage-2 step of a k3-smol hybrid spends its time, by kind of operator.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/stage2_profile.py ~/.cache/k3chat/models/k3-smol-teacher \
        --kda 4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29

Why: CPU stage 2 is what every CPU session of issue 7 waits on (~125 tokens/s). Session 35's
profile found a third of a step in matrix products and made two identity computations free;
this says what dominates after that, so the next speed-up goes where the time is. Runs
`train_stage2` (teacher forward, student forward under bf16 autocast, KL + top-1 + TVD loss,
backward, AdamW) at LR 0 with every KDA layer training, profiles steps after a warm-up, and
prints a markdown table of self CPU time per operator group (each operator's own time, not
its children's).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from collections import defaultdict
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
from stage2_step import hybrid_pair
from torch.profiler import ProfilerActivity, profile

from k3chat_model.distill.stage2 import Stage2Config, train_stage2

GROUPS = {
    "matrix products": ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm"),
    "triangular solves": ("linalg_solve_triangular",),
    "softmax / log-softmax / exp / log": ("softmax", "log_softmax", "exp", "log", "logsumexp"),
    "copies and dtype casts": ("copy_", "to", "_to_copy", "clone", "contiguous", "cat", "stack"),
    "reductions": ("sum", "mean", "norm", "linalg_vector_norm", "max", "argmax", "abs"),
    "optimizer": ("_fused_adamw", "_foreach", "addcdiv", "lerp"),
}


def group_of(name: str) -> str:
    op = name.removeprefix("aten::")
    for group, ops in GROUPS.items():
        if op in ops or any(op.startswith(p) for p in ops if p.startswith("_foreach")):
            return group
    return "elementwise and other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="teacher-equivalent k3-smol checkpoint dir")
    ap.add_argument("--kda", default="4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="profiled steps after one warm-up")
    ap.add_argument("--by-shape", type=int, default=0, metavar="N",
                    help="also list the N costliest operators by input shape (says which module)")  # fmt: skip
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    layers = [int(x) for x in a.kda.split(",") if x]
    teacher, student, kda = hybrid_pair(a.teacher, layers)
    rows = torch.randint(0, student.config.vocab_size, (a.batch, a.tokens))

    def run(steps: int, tmp: str) -> None:
        cfg = Stage2Config(steps * rows.numel(), batch=a.batch, lr=0.0, ckpt_seconds=1e9,
                           top1_weight=0.5, tvd_weight=1.0)  # fmt: skip
        train_stage2(teacher, student, kda, rows, torch.ones_like(rows), cfg, Path(tmp) / "s.pt")

    with tempfile.TemporaryDirectory() as tmp:
        run(1, tmp + "/w")  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=a.by_shape > 0) as prof:
            run(a.steps, tmp + "/p")
    by_group: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        by_group[group_of(ev.key)] += ev.self_cpu_time_total
        by_op[ev.key] += ev.self_cpu_time_total
    total = sum(by_group.values())
    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
        f"torch {torch.__version__}, {platform.machine()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    print(f"KDA layers {layers}, all training; batch {a.batch} x {a.tokens}; {a.steps} steps; "
          f"{total / 1e6 / a.steps:.2f} s of operator time a step\n")  # fmt: skip
    print("| operator group | share |\n|---|---|")
    for group, t in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {100 * t / total:.1f}% |")
    print("\n| top operators | share |\n|---|---|")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1])[:12]:
        print(f"| `{op}` | {100 * t / total:.1f}% |")
    if a.by_shape:
        print("\n| operator | input shapes | share |\n|---|---|---|")
        shaped = sorted(
            prof.key_averages(group_by_input_shape=True), key=lambda e: -e.self_cpu_time_total
        )
        for ev in shaped[: a.by_shape]:
            shapes = ", ".join(str(list(s)) for s in ev.input_shapes if s)
            print(f"| `{ev.key}` | {shapes} | {100 * ev.self_cpu_time_total / total:.1f}% |")


if __name__ == "__main__":
    main()
