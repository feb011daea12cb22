"""One stage-2 distillation step of a k3-smol hybrid, with every KDA layer training or only some.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/stage2_step.py /tmp/k3home-distill/models/k3-smol \
        --kda 5,6,7,12,22,24,25,26,27,28,29 --train all 22

Why: growing a shipped hybrid by one layer can freeze the layers it already has
(`--stage2-pretrained-lr-scale 0`). Autograd then starts at the lowest layer that trains, so the
backward skips every layer below it. This measures what that saves, side by side in one process:
a step is the teacher forward, the student forward under bf16 autocast, KL + top-1 loss,
backward and AdamW, at batch 2 × 512 tokens. KDA layers are freshly initialised from the teacher
(the cost does not depend on their values). Prints a markdown table of median seconds per step.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in
from k3chat_model.distill.stage2 import kd_loss
from k3chat_model.loading import load_model


def layer_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def step_seconds(teacher, student, train: list[torch.nn.Module], ids, repeats: int) -> float:  # noqa: ANN001
    """Median seconds of a full training step with the parameters of `train` trainable."""
    student.requires_grad_(False)
    params = [p for m in train for p in m.requires_grad_(True).parameters()]
    opt = torch.optim.AdamW(params, lr=0.0)  # lr 0: the weights stay as they are between cases
    mask = torch.ones_like(ids)
    times = []
    for r in range(repeats + 1):  # the first step warms up
        t0 = time.perf_counter()
        with torch.no_grad():
            t_logits = teacher(ids).logits
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s_logits = student(ids).logits
        kl, ce = kd_loss(t_logits, s_logits, mask)
        (kl + 0.5 * ce).backward()
        opt.step()
        if r:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    teacher = load_model(a.teacher, dtype=torch.bfloat16).eval()
    student = load_model(a.teacher, dtype=torch.bfloat16)
    kcfg = kda_config(student.config, list(range(student.config.num_hidden_layers)))
    kda = {i: init_kda_from_gqa(student.model.layers[i].self_attn, kcfg, i) for i in a.kda}
    swap_in(student, kda)
    ids = torch.randint(0, student.config.vocab_size, (a.batch, a.tokens))
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
        s = step_seconds(teacher, student, [kda[i] for i in train], ids, a.repeats)
        print(f"| {case} | {s:.2f} | {a.batch * a.tokens / s:.0f} |")


if __name__ == "__main__":
    main()
