"""bf16 products and attention on this CPU: torch's kernels vs the fp32 paths of `layers/`.

    python benchmarks/cpu_bf16.py [--model k3-smol] [--repeats 3]

1. One projection (576 → 1536, 40 distinct weights so they are not cache-resident) at growing
   row counts: microseconds per call in bf16 and via fp32, and the ratio — where the crossover
   `FP32_MIN_ROWS` comes from.
2. The engine on a bf16 model with the path off (`native`) and on (`fp32`), side by side in one
   process, alternating: prefill tok/s at 1,024 tokens and decode tok/s (48 tokens).
3. The same with `--quantize nf4`, whose bitsandbytes layers compute in fp32 (`fp32`) or bf16.
4. Attention (`layers/sdpa.py`) in bf16 and via fp32: one decode step against 4,096 cached
   tokens, a causal 1,024-token prefill and stage 2's forward + backward at 2 × 512 (k3-smol's
   9 query and 3 KV heads of 64); then the engine's decode tok/s after a `--context`-token
   prefill, `native` against `fp32`.
On CPUs with native bf16 (AVX512-BF16, AMX) both columns of table 1 should be close and
`cpu_bf16_is_slow()` is False, so the engine never takes the detour.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from decode import decode_rate, env_line, prefill_rate  # noqa: E402

from k3chat_model.engine import Engine  # noqa: E402
from k3chat_model.layers import linear as lin  # noqa: E402
from k3chat_model.layers.sdpa import attention  # noqa: E402


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "?"
    model = next(
        (ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln), "?"
    )
    flags = set(next((ln for ln in text.splitlines() if ln.startswith("flags")), "").split())
    has = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}; {' '.join(has)}"


def projection_table(repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(1536, 576, generator=g).bfloat16() for _ in range(40)]
    print("| rows | bf16 kernel µs | fp32 path µs | speed-up |")
    print("|---|---|---|---|")
    for rows in (1, 2, 4, 8, 16, 32, 64, 512):
        x = torch.randn(rows, 576, generator=g).bfloat16()
        paths = {
            "bf16": lambda x, w: F.linear(x, w),
            "fp32": lambda x, w: F.linear(x.float(), w.float()).bfloat16(),
        }
        per = {}
        for name, fn in paths.items():
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                for w in weights:
                    fn(x, w)
                times.append((time.perf_counter() - t) / len(weights))
            per[name] = statistics.median(times) * 1e6
        print(
            f"| {rows} | {per['bf16']:.0f} | {per['fp32']:.0f} | {per['bf16'] / per['fp32']:.2f}× |"
        )


def set_mode(mode: str) -> None:
    os.environ[lin.MODE_ENV] = mode
    lin.cpu_bf16_is_slow.cache_clear()


def engine_rows(
    title: str, engines: dict[str, Engine], prefill_tokens: int, decode_tokens: int, repeats: int
) -> None:
    """Prefill and decode tok/s of one engine per mode, measured alternately; a markdown table."""
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        for mode, engine in engines.items():
            set_mode(mode)
            runs.setdefault((mode, "prefill"), []).append(prefill_rate(engine, prefill_tokens, 1))
            runs.setdefault((mode, "decode"), []).append(decode_rate(engine, decode_tokens, 1))
    print(f"| {title} | prefill {prefill_tokens:,} tok/s | decode tok/s |")
    print("|---|---|---|")
    for mode in engines:
        p, d = runs[(mode, "prefill")], runs[(mode, "decode")]
        print(
            f"| {mode} | {statistics.median(p):.0f} ({', '.join(f'{v:.0f}' for v in p)}) "
            f"| {statistics.median(d):.1f} ({', '.join(f'{v:.1f}' for v in d)}) |"
        )


def engine_table(model: str, repeats: int) -> None:
    """One bf16 engine: the path is chosen per product, so the mode switches it on and off."""
    engine = Engine.load(model, dtype="bfloat16")
    engine_rows("bf16 products", {"native": engine, "fp32": engine}, 1024, 48, repeats)


def nf4_table(model: str, repeats: int) -> None:
    """bitsandbytes nf4: the compute dtype is chosen at quantization (`default_compute_dtype`),
    so each setting gets its own engine."""
    engines = {}
    for mode in ("native", "fp32"):
        set_mode(mode)
        engines[mode] = Engine.load(model, dtype="bfloat16", quantization="nf4")
    engine_rows("nf4, bf16 products", engines, 512, 24, repeats)


def attention_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, train: bool) -> None:
    """One causal (or, for a single query, full) GQA attention; with its backward if `train`."""
    with torch.set_grad_enabled(train):
        o = attention(q, k, v, is_causal=q.shape[2] == k.shape[2], enable_gqa=True)
        if train:
            o.float().sum().backward()


def attention_table(repeats: int) -> None:
    """`attention` with the fp32 detour off and on, on k3-smol's head layout."""
    g = torch.Generator().manual_seed(0)
    cases = {  # name: (batch, queries, keys, with backward)
        "decode step, 4,096 cached": (1, 1, 4096, False),
        "causal prefill, 1,024": (1, 1024, 1024, False),
        "stage-2 forward + backward, 2 × 512": (2, 512, 512, True),
    }
    print("| attention (9 query / 3 KV heads of 64) | bf16 kernel ms | fp32 path ms | speed-up |")
    print("|---|---|---|---|")
    for name, (b, t, tk, train) in cases.items():
        q, k, v = (
            torch.randn(b, h, n, 64, generator=g).bfloat16().requires_grad_(train)
            for h, n in ((9, t), (3, tk), (3, tk))
        )

        times: dict[str, list[float]] = {"native": [], "fp32": []}
        for _ in range(repeats):
            for mode in times:
                set_mode(mode)
                attention_step(q, k, v, train)  # warm-up
                t0 = time.perf_counter()
                for _ in range(5):
                    attention_step(q, k, v, train)
                times[mode].append((time.perf_counter() - t0) / 5 * 1e3)
        a, f = statistics.median(times["native"]), statistics.median(times["fp32"])
        print(f"| {name} | {a:.2f} | {f:.2f} | {a / f:.2f}× |")


@torch.no_grad()
def long_decode_table(model: str, context: int, repeats: int) -> None:
    """Decode tok/s after a `context`-token prefill: the detour only changes attention there
    (decode's one-row products stay bf16 either way)."""
    engine = Engine.load(model, dtype="bfloat16")
    m = engine.model
    ids = torch.randint(100, 40000, (1, context), generator=torch.Generator().manual_seed(1))
    rates: dict[str, list[float]] = {"native": [], "fp32": []}
    for _ in range(repeats):
        for mode in rates:
            set_mode(mode)
            cache = m.make_cache()
            for j in range(0, context, 512):
                logits = m(ids[:, j : j + 512], cache, num_logits=1).logits
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            for _ in range(24):
                nxt = m(nxt, cache).logits[:, -1].argmax(-1, keepdim=True)
            rates[mode].append(24 / (time.perf_counter() - t0))
    print(f"| {model}, bf16 | decode tok/s after {context:,} tokens |")
    print("|---|---|")
    for mode, r in rates.items():
        print(f"| {mode} | {statistics.median(r):.1f} ({', '.join(f'{v:.1f}' for v in r)}) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="k3-smol")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--context", type=int, default=4096, help="table 4's prefill before decode")
    ap.add_argument("--only-attention", action="store_true", help="table 4 only")
    args = ap.parse_args()
    os.environ.pop(lin.MODE_ENV, None)
    print(f"<!-- {env_line()} -->")
    print(f"<!-- cpu: {cpu_flags()}; detected slow bf16: {lin.cpu_bf16_is_slow()} -->\n")
    if args.only_attention:
        attention_table(args.repeats)
        print()
        long_decode_table(args.model, args.context, args.repeats)
        print(f"\n<!-- {env_line()} -->")
        return
    projection_table(args.repeats)
    print()
    engine_table(args.model, args.repeats)
    print()
    nf4_table(args.model, args.repeats)
    print()
    attention_table(args.repeats)
    print()
    long_decode_table(args.model, args.context, args.repeats)
    print(f"\n<!-- {env_line()} -->")


if __name__ == "__main__":
    main()
