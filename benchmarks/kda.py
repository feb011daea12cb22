"""KDA prefill and decode speed on this CPU: chunked form vs the per-token loop.

Run: `python benchmarks/kda.py` (defaults: H=4, K=V=128, fp32, 2 threads, 1k/4k/16k tokens).
Prints a markdown table for docs/benchmarks.md. The per-token loop is `fused_recurrent_kda`
over the whole prompt (the fastest loop here); lengths above --loop-max are extrapolated from
its rate at --loop-max and marked so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
import torch.nn.functional as F
from timing import median_seconds

from k3chat_model.ops.delta_rule import chunk_kda, fused_recurrent_kda


def inputs(T: int, H: int, D: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(1, T, H, D, generator=gen), dim=-1)
    k = F.normalize(torch.randn(1, T, H, D, generator=gen), dim=-1)
    v = torch.randn(1, T, H, D, generator=gen)
    g = -5.0 * torch.sigmoid(torch.randn(1, T, H, D, generator=gen))  # K3 gate range
    beta = torch.sigmoid(torch.randn(1, T, H, generator=gen))
    return q, k, v, g, beta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128, help="per-head K = V")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument(
        "--loop-max", type=int, default=4096, help="longest prompt the loop really runs"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk-size", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    H, D = args.heads, args.dim

    load_before = os.getloadavg()
    print(
        f"torch {torch.__version__}, nproc {os.cpu_count()}, threads {args.threads}, "
        f"H={H}, K=V={D}, fp32, chunk {args.chunk_size}, median of {args.repeats}"
    )
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}\n")
    print("| tokens | chunked tok/s | per-token loop tok/s | speed-up |")
    print("|---:|---:|---:|---:|")
    loop_rate = None
    for T in args.lengths:
        x = inputs(T, H, D)
        t_chunk = median_seconds(
            lambda x=x: chunk_kda(*x, chunk_size=args.chunk_size), args.repeats
        )
        note = ""
        if T <= args.loop_max:
            reps = max(1, min(args.repeats, 3))
            loop_rate = T / median_seconds(lambda x=x: fused_recurrent_kda(*x), reps)
        else:
            note = " (extrapolated)"
        chunk_rate = T / t_chunk
        lr = f"{loop_rate:,.0f}{note}" if loop_rate else "n/a"
        sp = f"{chunk_rate / loop_rate:.1f}x{note}" if loop_rate else "n/a"
        print(f"| {T:,} | {chunk_rate:,.0f} | {lr} | {sp} |")

    print("\n| decode step (T=1) | threads | median latency |")
    print("|---|---:|---:|")
    for threads in sorted({1, args.threads}):
        torch.set_num_threads(threads)
        q, k, v, g, beta = inputs(1, H, D)
        state = torch.zeros(1, H, D, D)
        steps = []
        for _ in range(300):
            t0 = time.perf_counter()
            fused_recurrent_kda(q, k, v, g, beta, initial_state=state, inplace=True)
            steps.append(time.perf_counter() - t0)
        print(
            f"| fused_recurrent_kda, H={H}, {D}x{D} state | {threads} | "
            f"{statistics.median(steps[50:]) * 1e6:.0f} us |"
        )
    load_after = os.getloadavg()
    print(f"\nload average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")


if __name__ == "__main__":
    main()
