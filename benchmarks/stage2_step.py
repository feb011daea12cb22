"""One stage-2 distillation step of a k3-smol hybrid, with every KDA layer training or only some.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/stage2_step.py /tmp/k3home-distill/models/k3-smol \
        --kda 5,6,7,12,22,24,25,26,27,28,29 --train all 22

Why: growing a shipped hybrid by one layer can freeze the layers it already has
(`--stage2-pretrained-lr-scale 0`). Autograd then starts at the lowest layer that trains, so the
backward skips every layer below it. This measures what that saves, side by side in one process,
on stage 2's own steps (`train_stage2`: teacher forward, student forward under bf16 autocast,
KL + top-1 loss, backward, AdamW) at batch 2 × 512 tokens. KDA layers are freshly initialised
from the teacher (the cost does not depend on their values). Prints a markdown table of median
seconds per step.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in
from k3chat_model.distill.stage2 import Stage2Config, train_stage2
from k3chat_model.loading import load_model


def layer_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def hybrid_pair(teacher_dir: Path, layers: list[int]) -> tuple:
    """(teacher, student, kda): the bf16 teacher, and a bf16 copy with `layers` swapped for fp32
    KDA layers freshly initialised from it (a step's cost does not depend on their values)."""
    teacher = load_model(teacher_dir, dtype=torch.bfloat16).eval()
    student = load_model(teacher_dir, dtype=torch.bfloat16)
    kcfg = kda_config(student.config, list(range(student.config.num_hidden_layers)))
    kda = {i: init_kda_from_gqa(student.model.layers[i].self_attn, kcfg, i) for i in layers}
    swap_in(student, kda)
    return teacher, student, kda


def step_seconds(  # noqa: ANN001
    teacher,
    student,
    kda: dict,
    train: list[int],
    rows,
    repeats: int,
    tvd_weight: float = 0.0,
    compile_loss: bool = False,
) -> float:
    """Median seconds of `train_stage2` steps with only `train` learning (the rest at LR scale 0,
    frozen); LR 0, so the weights stay as they are between cases."""
    marks: list[float] = []
    cfg = Stage2Config(
        (repeats + 2) * rows.numel(),
        batch=len(rows),
        lr=0.0,
        ckpt_seconds=1e9,
        top1_weight=0.5,
        tvd_weight=tvd_weight,
        lr_scale={i: 0.0 for i in kda if i not in train},
        compile_loss=compile_loss,
    )
    with tempfile.TemporaryDirectory() as tmp:
        train_stage2(teacher, student, kda, rows, torch.ones_like(rows), cfg, Path(tmp) / "s2.pt",
                     on_step=lambda _s: marks.append(time.perf_counter()))  # fmt: skip
    return statistics.median(b - a for a, b in zip(marks[1:], marks[2:]))  # first step warms up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="teacher-equivalent k3-smol checkpoint dir")
    ap.add_argument("--kda", type=layer_list, default=layer_list("5,6,7,12,22,24,25,26,27,28,29"))
    ap.add_argument(
        "--train",
        nargs="+",
        default=["all", "22"],
        help="cases: 'all', or comma-separated 0-based layers that train (the rest frozen)",
    )
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    teacher, student, kda = hybrid_pair(a.teacher, a.kda)
    rows = torch.randint(0, student.config.vocab_size, (a.batch, a.tokens))
    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
        f"torch {torch.__version__}, {platform.machine()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    print(f"KDA layers {a.kda}; batch {a.batch} x {a.tokens} tokens; median of {a.repeats}\n")
    print("| layers training | s / step | tok/s |")
    print("|---|---|---|")
    for case in a.train:
        train = list(kda) if case == "all" else layer_list(case)
        s = step_seconds(teacher, student, kda, train, rows, a.repeats)
        print(f"| {case} | {s:.2f} | {a.batch * a.tokens / s:.0f} |")


if __name__ == "__main__":
    main()
