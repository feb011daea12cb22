"""The parts of one stage-1 step of a growth run: the teacher pass and one KDA layer's training.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/stage1_step.py /tmp/k3home-distill/models/k3-smol \
        --layer 22

Why: a growth run trains one new layer with stage 1 for millions of tokens. Each step runs the
teacher to capture that layer's attention input and output; `capture` stops the pass at the
last layer it needs instead of running all of them. This times, side by side in one process at
batch 4 × 512 tokens: the full teacher pass, the pass that stops at `--layer`, and the student
layer's forward + backward on the captured input. Prints a markdown table of median seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
from timing import median_seconds

from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.kda_train import kda_forward_train
from k3chat_model.distill.stage1 import capture
from k3chat_model.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="k3-smol build directory")
    ap.add_argument("--layer", type=int, default=22)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    teacher = load_model(a.teacher, dtype=torch.bfloat16)
    ids = torch.randint(
        3, teacher.config.vocab_size, (4, 512), generator=torch.Generator().manual_seed(0)
    )
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    student = init_kda_from_gqa(teacher.model.layers[a.layer].self_attn, kcfg, a.layer)
    x, y = capture(teacher, ids, [a.layer])[a.layer]

    def full() -> None:
        with torch.no_grad():
            teacher.model(ids)

    def student_step() -> None:
        loss = (kda_forward_train(student, x) - y).pow(2).sum() / y.pow(2).sum()
        loss.backward()
        student.zero_grad(set_to_none=True)

    rows = {
        "teacher pass, all layers": median_seconds(full, a.repeats),
        f"teacher pass, stopped at layer {a.layer} (`capture`)": median_seconds(
            lambda: capture(teacher, ids, [a.layer]), a.repeats
        ),
        f"KDA layer {a.layer} forward + backward": median_seconds(student_step, a.repeats),
    }
    load = os.getloadavg()[0]
    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {load:.2f}, torch {torch.__version__}, "
        f"{platform.machine()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; "
        f"batch 4 × 512, median of {a.repeats}\n"
    )
    print("| part of a stage-1 step | s |")
    print("|---|---|")
    for name, s in rows.items():
        print(f"| {name} | {s:.3f} |")


if __name__ == "__main__":
    main()
