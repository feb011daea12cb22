"""KDA's short conv at decode: `conv1d` vs the sum over K-wide windows (`layers/kda.ShortConv`).

    python benchmarks/short_conv.py [--model k3-smol] [--repeats 3]

1. One ShortConv (576 channels, kernel 4, bf16 input, one thread) at growing lengths: µs per
   call on each path — where `CONV_WINDOW_MAX_TOKENS` comes from.
2. The engine's decode tok/s with the window path off (`CONV_WINDOW_MAX_TOKENS = 0`, every call
   through conv1d as before) and on, side by side in one process, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

sys.path.insert(0, str(Path(__file__).parent))
from decode import decode_rate, env_line  # noqa: E402

from k3chat_model.engine import Engine  # noqa: E402
from k3chat_model.layers import kda  # noqa: E402


def conv_table(repeats: int) -> None:
    conv = kda.ShortConv(576, 4)
    torch.nn.init.normal_(conv.weight)
    default = kda.CONV_WINDOW_MAX_TOKENS
    print("| tokens | conv1d µs | windows µs | speed-up |")
    print("|---|---|---|---|")
    with torch.no_grad():
        for T in (1, 4, 8, 16, 64, 256):
            x, tail = torch.randn(1, T, 576).bfloat16(), torch.randn(1, 3, 576).bfloat16()
            per = {}
            for name, limit in (("conv1d", 0), ("windows", 1 << 30)):
                kda.CONV_WINDOW_MAX_TOKENS = limit
                times = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    for _ in range(200):
                        conv(x, tail)
                    times.append((time.perf_counter() - t) / 200)
                per[name] = statistics.median(times) * 1e6
            print(
                f"| {T} | {per['conv1d']:.0f} | {per['windows']:.0f} | {per['conv1d'] / per['windows']:.2f}× |"
            )
    kda.CONV_WINDOW_MAX_TOKENS = default


def engine_table(model: str, repeats: int) -> None:
    engine = Engine.load(model)
    default = kda.CONV_WINDOW_MAX_TOKENS
    runs: dict[str, list[float]] = {"conv1d": [], "windows": []}
    for _ in range(repeats):
        for name, limit in (("conv1d", 0), ("windows", default)):
            kda.CONV_WINDOW_MAX_TOKENS = limit
            runs[name].append(decode_rate(engine, 48, 1))
    kda.CONV_WINDOW_MAX_TOKENS = default
    print("| short conv at decode | decode tok/s (median) | runs |")
    print("|---|---|---|")
    for name, rates in runs.items():
        print(
            f"| {name} | {statistics.median(rates):.1f} | {', '.join(f'{r:.1f}' for r in rates)} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="k3-smol")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"<!-- {env_line()} -->\n")
    torch.set_num_threads(1)
    conv_table(args.repeats)
    torch.set_num_threads(2)
    print()
    engine_table(args.model, args.repeats)
    print(f"\n<!-- {env_line()} -->")


if __name__ == "__main__":
    main()
