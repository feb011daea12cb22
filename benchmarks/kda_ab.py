"""`chunk_kda` against another version of its file, side by side, under three decay gates.

    git show REV:k3chat_model/ops/delta_rule/chunk.py > /tmp/chunk_old.py
    python benchmarks/kda_ab.py /tmp/chunk_old.py [--tokens 1024] [--threads 1] [--repeats 7]

Why: a kernel change can help one gate regime and cost another. Strong decay (gates near
K3's -5 bound) drives products into fp32's denormal range, where x86 arithmetic is several
times slower; mild decay (k3-smol's trained gates) never gets there. The two versions
alternate (order flipped every repeat), the first repeat is dropped, medians are printed,
with each version's relative error against the float64 result.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from pathlib import Path

import torch
from timing import kda_qkv_beta

from k3chat_model.ops.delta_rule import chunk_kda


def load_other(path: Path):  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("chunk_other", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.chunk_kda


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("other", type=Path, help="another chunk.py, e.g. from git show")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    other = load_other(a.other)
    B, T, H, D = 1, a.tokens, a.heads, 64
    q, k, v, beta = kda_qkv_beta(T, H, D)
    gates = {
        "mixed, -5·sigmoid(3·randn)": -5 * torch.sigmoid(3 * torch.randn(B, T, H, D)),
        "at the bound, -4.9": torch.full((B, T, H, D), -4.9),
        "mild, -0.05": torch.full((B, T, H, D), -0.05),
    }
    print(f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
          f"threads {a.threads}; T={T}, {H} heads of {D}, fp32")  # fmt: skip
    print("| gate | other ms | this ms | speed-up | other rel err | this rel err |")
    print("|---|---|---|---|---|---|")
    for name, g in gates.items():
        ref, _ = chunk_kda(*(x.double() for x in (q, k, v, g, beta)))
        fns = {"other": other, "this": chunk_kda}
        ts: dict[str, list[float]] = {n: [] for n in fns}
        err = {}
        for r in range(a.repeats):
            for n in fns if r % 2 == 0 else reversed(fns):
                t0 = time.perf_counter()
                o, _ = fns[n](q, k, v, g, beta, output_final_state=True)
                ts[n].append(time.perf_counter() - t0)
                err[n] = float((o.double() - ref).norm() / ref.norm())
        mo, mt = (statistics.median(ts[n][1:]) * 1e3 for n in fns)
        print(f"| {name} | {mo:.1f} | {mt:.1f} | {mo / mt:.2f}× | {err['other']:.1e} | "
              f"{err['this']:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
