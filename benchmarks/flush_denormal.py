"""Prefill and decode speed with denormal floats flushed to zero, against the default, side by side.

    python benchmarks/flush_denormal.py CHECKPOINT [--context 1024 8192] [--repeats 3] [--threads 1]

Why: KDA's decay factors exp(G) reach ~1e-35 inside a chunk, and products of such factors fall
below fp32's (and bf16's) normal range, where x86 arithmetic runs many times slower. Flushing
them (`torch.set_flush_denormal`, this thread only) changes each by less than 1.2e-38, but not
always a result: a flushed factor may meet one of e^85 (docs/benchmarks.md). For each context the
two settings alternate, `--repeats` times each, on one loaded model; medians are printed.
A second table times `chunk_kda` alone (512 tokens, 9 heads of 64, fp32) under a strong gate
(-5·sigmoid(randn)), one at K3's bound (-4.9) and a mild one (-0.05).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from distill_decode import TEXT, bench
from timing import kda_qkv_beta

from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.loading import load_model
from k3chat_model.ops.delta_rule import chunk_kda


def kernel_table(repeats: int) -> None:
    """`chunk_kda` alone, flush off and on, under strong, bound and mild decay gates."""
    B, T, H, D = 1, 512, 9, 64
    q, k, v, beta = kda_qkv_beta(T, H, D)
    gates = {
        "strong": -5 * torch.sigmoid(torch.randn(B, T, H, D)),
        "at the bound, -4.9": torch.full((B, T, H, D), -4.9),
        "mild": torch.full((B, T, H, D), -0.05),
    }
    print("\n| chunk_kda gate | flush | ms (median of 2x repeats) | relative change of o |")
    print("|---|---|---|---|")
    for name, g in gates.items():
        outs = {}
        for flush in (False, True):
            torch.set_flush_denormal(flush)
            ts = []
            for _ in range(2 * repeats + 1):
                t0 = time.perf_counter()
                outs[flush], _ = chunk_kda(q, k, v, g, beta, output_final_state=True)
                ts.append(time.perf_counter() - t0)
            diff = ((outs[flush] - outs[False]).norm() / outs[False].norm()).item()
            print(f"| {name} | {'on' if flush else 'off'} | {statistics.median(ts[1:]) * 1e3:.1f} "
                  f"| {diff:.1e} |")  # fmt: skip
        torch.set_flush_denormal(False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--context", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = load_model(a.checkpoint, dtype=torch.bfloat16)
    base = ChatTokenizer(a.checkpoint).encode(TEXT)
    kda = sum(k == "kda" for k in model.config.layer_kinds)
    print(f"{a.checkpoint.name}: {kda} KDA layers; nproc {os.cpu_count()}, load "
          f"{os.getloadavg()[0]:.2f}, torch {torch.__version__}, threads {a.threads}")  # fmt: skip
    print("| context | flush | prefill tok/s (median; runs) | decode tok/s (median; runs) |")
    print("|---|---|---|---|")
    for n in a.context:
        ids = torch.tensor([(base * (n // len(base) + 1))[:n]])
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for r in range(a.repeats):
            for flush in (False, True) if r % 2 == 0 else (True, False):
                torch.set_flush_denormal(flush)
                runs[flush].append(bench(model, ids))
        torch.set_flush_denormal(False)
        for flush, rs in runs.items():
            pre = [x["prefill_tok_s"] for x in rs]
            dec = [x["decode_tok_s"] for x in rs]
            print(f"| {n} | {'on' if flush else 'off'} | {statistics.median(pre):.0f}; {pre} | "
                  f"{statistics.median(dec):.2f}; {dec} |")  # fmt: skip
    kernel_table(a.repeats)


if __name__ == "__main__":
    main()
