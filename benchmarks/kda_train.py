"""Distillation's differentiable KDA pieces on this CPU, forward + backward at stage-2 shapes.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/kda_train.py

Defaults: batch 2 × 512 tokens, k3-smol's 9 heads × 64, gates across K3's range, 2 threads, 7
repeats. Prints a markdown table of median milliseconds, side by side in one process: the
engine's depthwise `conv1d` short conv against distillation's shift-sum (`short_conv_train`),
and the chunked delta rule (`chunk_kda_train`) for scale. Distillation runs with
`OMP_WAIT_POLICY=ACTIVE` (docs/k3-smol.md); under the app's PASSIVE default every small op
waits for sleeping OpenMP workers, and the delta rule's chunk loop runs about 7× slower.
"""

from __future__ import annotations

import argparse
import os

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
import torch.nn.functional as F
from timing import median_seconds

from k3chat_model.distill.kda_train import chunk_kda_train, short_conv_train
from k3chat_model.layers.kda import ShortConv


def backward_of(fn, *args: torch.Tensor):
    """A closure running fn on fresh leaf copies of args, then backward of its sum."""

    def run() -> None:
        leaves = [a.detach().clone().requires_grad_(True) for a in args]
        fn(*leaves).float().sum().backward()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, T, H, D = a.batch, a.tokens, a.heads, a.dim
    gen = torch.Generator().manual_seed(0)
    conv = ShortConv(H * D, 4)
    with torch.no_grad():
        conv.weight.normal_(0, 0.5, generator=gen)
    x = torch.randn(B, T, H * D, generator=gen).to(torch.bfloat16)  # the projections' dtype
    q = F.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1)
    v = torch.randn(B, T, H, D, generator=gen)
    g = -5.0 * torch.sigmoid(torch.randn(B, T, H, D, generator=gen))  # K3 gate range
    beta = torch.sigmoid(torch.randn(B, T, H, generator=gen))
    rows = [
        ("short conv: engine `conv1d`", backward_of(lambda t: conv(t, None)[0], x)),
        ("short conv: `short_conv_train`", backward_of(lambda t: short_conv_train(conv, t), x)),
        ("delta rule: `chunk_kda_train`", backward_of(chunk_kda_train, q, k, v, g, beta)),
    ]
    print(f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, {a.threads} threads, "
          f"[{B}, {T}, {H}×{D}], median of {a.repeats}\n")  # fmt: skip
    print("| op | forward + backward, ms |\n|---|---|")
    for name, fn in rows:
        print(f"| {name} | {1000 * median_seconds(fn, a.repeats):.1f} |")


if __name__ == "__main__":
    main()
