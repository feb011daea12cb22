"""fp32 products of a few rows by a weight stored row-major (as `nn.Linear` keeps it) or column-major.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/small_matmul.py

Why: on CPUs without native bf16 the pipeline multiplies in fp32 (`layers/linear.py`), and two
of its hot products have few rows: batched teacher decoding (48 rows a step,
`distill.generate.fp32_on_slow_cpu`) and stage 2's loss, which applies the 49,152-token head 32
positions at a time (`distill.fused_loss`). On a 2-core Ice Lake Xeon (session 54) torch's
product `x @ Wᵀ` with `W` an ordinary row-major [out, in] matrix ran those at half the speed
of the same product with `W` stored transposed in memory (`W.t().contiguous().t()`: same
shape, same values). This times both layouts on k3-smol's shapes, alternating, and prints a
markdown table of medians; a ratio above 1 means column-major is faster.
"""

from __future__ import annotations

import argparse
import os
import platform

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
import torch.nn.functional as F
from timing import median_seconds as seconds

SHAPES = {
    "MLP up/gate 576→1536": (576, 1536),
    "MLP down 1536→576": (1536, 576),
    "attention q/o 576→576": (576, 576),
    "attention k/v 576→192": (576, 192),
    "head 576→49152": (576, 49152),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,8,16,32,48,128,512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
        f"torch {torch.__version__}, {platform.machine()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}\n"
    )
    print("| product | rows | row-major, ms | column-major, ms | ratio |\n|---|---|---|---|---|")
    for name, (k, n) in SHAPES.items():
        w = torch.randn(n, k, generator=g)
        w_col = w.t().contiguous().t()
        for rows in (int(r) for r in a.rows.split(",")):
            x = torch.randn(rows, k, generator=g)
            reps = a.repeats if n < 10_000 else max(3, a.repeats // 3)
            row_t = seconds(lambda x=x, w=w: F.linear(x, w), reps)
            col_t = seconds(lambda x=x, w=w_col: F.linear(x, w), reps)
            print(f"| {name} | {rows} | {1e3 * row_t:.3f} | {1e3 * col_t:.3f} | "
                  f"{row_t / col_t:.2f} |")  # fmt: skip
    # the loss's gradient product: [32, V] @ [V, 576], which wants the head row-major
    grad = torch.randn(32, 49152, generator=g)
    head = torch.randn(49152, 576, generator=g)
    head_col = head.t().contiguous().t()
    row_t = seconds(lambda: grad @ head, a.repeats)
    col_t = seconds(lambda: grad @ head_col, a.repeats)
    print(f"| loss gradient [32, V] @ head | 32 | {1e3 * row_t:.3f} | {1e3 * col_t:.3f} | "
          f"{row_t / col_t:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
