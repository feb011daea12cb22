"""Decode / prefill / resume benchmark on this machine. Prints markdown tables.

    python benchmarks/decode.py [--model k3-smol] [--tokens 48] [--repeats 3] [--quick]

1. decode tok/s (batch 1) for bf16, nf4, int8, and % of the memory-bandwidth roofline
   (weight bytes read per token ÷ measured read bandwidth);
2. prefill tok/s vs input length;
3. time to resume a 4k-token conversation from a snapshot vs re-prefilling it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.engine import Engine
from k3chat_model.events import Message, SamplingParams


def env_line() -> str:
    load = os.getloadavg()
    return (
        f"nproc={os.cpu_count()} load={load[0]:.2f},{load[1]:.2f},{load[2]:.2f} torch={torch.__version__} "
        f"threads={torch.get_num_threads()} python={platform.python_version()}"
    )


def read_bandwidth_gbs(n_bytes: int = 1 << 30, repeats: int = 5) -> float:
    """Sequential read bandwidth: sum over a large fp32 tensor (the decode access pattern)."""
    x = torch.ones(n_bytes // 4)
    x.sum()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return n_bytes / statistics.median(times) / 1e9


def bytes_per_token(model) -> int:
    """Weight bytes one decode step reads: all projections, only top-k routed experts, 1 embedding row."""
    cfg = model.config
    total = 0
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        b = t.numel() * t.element_size()
        if "embed_tokens" in name and not cfg.tie_word_embeddings:
            b = t[0].numel() * t.element_size()
        if ".experts." in name and cfg.num_experts:
            b = b * cfg.num_experts_per_token / cfg.num_experts
        total += b
    for m in model.modules():  # bitsandbytes 4-bit weights live in uint8 params already counted
        qs = getattr(getattr(m, "weight", None), "quant_state", None)
        if qs is not None and getattr(qs, "absmax", None) is not None:
            total += qs.absmax.numel() * qs.absmax.element_size()
    return int(total)


def decode_rate(engine: Engine, tokens: int, repeats: int) -> float:
    sp = SamplingParams(temperature=0, repetition_penalty=1.0, max_tokens=tokens, stop_token_ids=())
    rates = []
    for _ in range(repeats):
        engine.reset()
        stats = list(
            engine.generate(
                [Message("user", "Tell me a long story about a lighthouse keeper.")], sampling=sp
            )
        )[-1]
        rates.append(stats.decode_tps)
    return statistics.median(rates)


def prefill_rate(engine: Engine, n: int, repeats: int) -> float:
    ids = torch.randint(
        100, 40000 if engine.config.vocab_size > 40000 else engine.config.vocab_size - 1, (n,)
    ).tolist()
    times = []
    for _ in range(repeats):
        engine.reset()
        t = time.perf_counter()
        engine.prefill(ids)
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="k3-smol")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    ap.add_argument("--quant", default="bf16,nf4,int8")
    ap.add_argument("--resume-tokens", type=int, default=4096)
    args = ap.parse_args()
    print(f"<!-- {env_line()} -->")
    bw = read_bandwidth_gbs()
    print(f"\nmeasured read bandwidth: {bw:.1f} GB/s\n")

    print("| weights | decode tok/s (median) | bytes read/token | roofline tok/s | % of roofline |")
    print("|---|---|---|---|---|")
    for q in args.quant.split(","):
        engine = Engine.load(args.model, dtype="bfloat16", quantization=None if q == "bf16" else q)
        rate = decode_rate(engine, args.tokens, args.repeats)
        bpt = bytes_per_token(engine.model)
        roof = bw * 1e9 / bpt
        print(f"| {q} | {rate:.1f} | {bpt / 1e6:.1f} MB | {roof:.0f} | {100 * rate / roof:.0f}% |")
        del engine

    engine = Engine.load(args.model, dtype="bfloat16")
    print("\n| decode threads (bf16) | decode tok/s (median) |")
    print("|---|---|")
    for n in (1, 2):
        engine.decode_threads = n
        print(f"| {n} | {decode_rate(engine, args.tokens, args.repeats):.1f} |")
    engine.decode_threads = 1
    print("\n| prompt tokens | prefill tok/s | seconds |")
    print("|---|---|---|")
    for n in [int(x) for x in args.lengths.split(",")]:
        r = prefill_rate(engine, n, 1 if n > 4096 else args.repeats)
        print(f"| {n} | {r:.0f} | {n / r:.2f} |")

    # resume: a 4k-token conversation, snapshot vs re-prefill
    filler = " ".join(["The quick brown fox jumps over the lazy dog."] * 2000)
    ids = engine.tokenizer.encode(filler)[: args.resume_tokens]
    text = engine.tokenizer.decode(ids)
    msgs = [Message("user", text)]
    engine.reset()
    list(engine.generate(msgs, sampling=SamplingParams(temperature=0, max_tokens=1)))
    snap = tempfile.mkdtemp(prefix="k3snap-")
    engine.save_state(f"{snap}/state")
    fresh = Engine.load(args.model, dtype="bfloat16")
    t = time.perf_counter()
    fresh.load_state(f"{snap}/state")
    fresh.prefill(engine.render(msgs))
    with_snap = time.perf_counter() - t
    fresh.reset()
    t = time.perf_counter()
    fresh.prefill(engine.render(msgs))
    without = time.perf_counter() - t
    print(f"\n| resume a {len(engine.render(msgs))}-token conversation | seconds |")
    print("|---|---|")
    print(f"| from snapshot | {with_snap:.2f} |")
    print(f"| re-prefill | {without:.2f} |")
    print(f"\n<!-- {env_line()} -->")


if __name__ == "__main__":
    main()
