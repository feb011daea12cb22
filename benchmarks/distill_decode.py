"""Decode speed and memory of k3-smol (all softmax) vs a KDA hybrid at long context.

    python benchmarks/distill_decode.py CHECKPOINT [--delta FILE | --kda 6,12,...] --context 1024 8192

For each context length: prefill that many tokens (chat text repeated), then decode 32 tokens
greedily, one at a time, through the engine's cached forward in bf16. Prints JSON with
prefill and decode tok/s, the cache size (attention KV + KDA state) and peak RSS. With
`--kda`, the listed layers (0-based) get freshly initialised KDA layers: speed and memory do
not depend on trained values, so a hybrid can be measured before it is trained.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import torch

from k3chat_model.cache import KDAState
from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in
from k3chat_model.distill.metrics import inference_copy
from k3chat_model.loading import load_model

TEXT = (
    "The city council met on Tuesday to discuss a proposal to convert the old railway yard into a "
    "public park. Supporters argued that the neighbourhood has little green space. "
)


def cache_bytes(cache) -> tuple[int, int]:  # noqa: ANN001
    kda = sum(
        int(s.recurrent.numel() * s.recurrent.element_size())
        + sum(int(t.numel() * t.element_size()) for t in s.conv)
        for s in cache.layers
        if isinstance(s, KDAState) and s.recurrent is not None
    )
    return int(cache.attention_bytes), kda


@torch.no_grad()
def bench(model, ids: torch.Tensor, n_decode: int = 32) -> dict:  # noqa: ANN001
    cache = model.make_cache()
    t0 = time.time()
    for j in range(0, ids.shape[1], 512):
        logits = model(ids[:, j : j + 512], cache, num_logits=1).logits
    t1 = time.time()
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(n_decode):
        nxt = model(nxt, cache).logits[:, -1].argmax(-1, keepdim=True)
    t2 = time.time()
    attn, kda = cache_bytes(cache)
    return {
        "context": ids.shape[1],
        "prefill_tok_s": round(ids.shape[1] / (t1 - t0), 1),
        "decode_tok_s": round(n_decode / (t2 - t1), 2),
        "kv_cache_MB": round(attn / 1e6, 1),
        "kda_state_MB": round(kda / 1e6, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--delta", type=Path)
    ap.add_argument("--kda", help="0-based layers to swap for untrained KDA layers")
    ap.add_argument("--context", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ckpt, tmp = a.checkpoint, None
    if a.delta:
        from k3chat_model.delta import apply_delta

        tmp = Path(tempfile.mkdtemp(prefix="k3bench-"))
        ckpt = tmp / "k3-smol"
        shutil.copytree(a.checkpoint, ckpt)
        apply_delta(ckpt, a.delta)
    model = load_model(ckpt, dtype=torch.bfloat16)
    if a.kda:
        layers = [int(x) for x in a.kda.split(",")]
        cfg = kda_config(model.config, list(range(model.config.num_hidden_layers)))
        swap_in(
            model,
            {
                i: inference_copy(
                    init_kda_from_gqa(model.model.layers[i].self_attn, cfg, i), torch.bfloat16
                )
                for i in layers
            },
        )
    tok = ChatTokenizer(a.checkpoint)
    base = tok.encode(TEXT)
    rows = []
    for n in a.context:
        ids = torch.tensor([(base * (n // len(base) + 1))[:n]])
        rows.append(bench(model, ids))
    out = {
        "checkpoint": str(a.checkpoint),
        "delta": str(a.delta) if a.delta else None,
        "kda_layers": [i for i, k in enumerate(model.config.layer_kinds) if k == "kda"],
        "threads": a.threads,
        "results": rows,
        "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(out))
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
