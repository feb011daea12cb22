"""How long one held-out evaluation of `distill timed` takes, one sequence per forward against
`--eval-batch` sequences per forward (`gate.kl_metrics(batch=N)`), on a KDA hybrid.

Session 34's H200 run spent 78 s on each evaluation, one sequence at a time, against about
45 s for 36 training steps between them. This prints, per batch size, the wall time of one
pass over a topics-sized set (teacher logits recomputed, as `timed` does for topics), and the
KL / top-1 it reports (which must agree across batch sizes).

    python benchmarks/eval_batch.py ~/.cache/k3chat/models/k3-smol-teacher --device cpu
    python benchmarks/eval_batch.py CONFIG_DIR --random --device cuda   # config.json only

`--random` builds the architecture from config.json with random weights: the time does not
depend on the weights, so a machine without the checkpoint can measure it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch

from k3chat_model.config import K3Config
from k3chat_model.distill.gate import kl_metrics
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.metrics import swapped
from k3chat_model.loading import load_model
from k3chat_model.model import K3ForCausalLM

G16 = "4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29"


def _model(path: Path, random: bool, device: str) -> K3ForCausalLM:
    if not random:
        return load_model(path, dtype=torch.bfloat16, device=device)
    torch.manual_seed(0)
    model = K3ForCausalLM(K3Config.from_file(path), torch.nn.Linear)
    with torch.no_grad():  # some tensors are left uninitialised until a checkpoint fills them
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            is_param = isinstance(t, torch.nn.Parameter)
            if not t.is_floating_point() or (not is_param and torch.isfinite(t).all()):
                continue  # computed buffers (e.g. rotary frequencies) stay as built
            if t.dim() >= 2:
                t.normal_(0.0, 0.02)
            else:
                t.fill_(1.0 if "norm" in name else 0.0)
    return model.to(torch.bfloat16).to(device).eval().requires_grad_(False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, help="checkpoint dir (or, with --random, a config dir)")
    p.add_argument("--random", action="store_true", help="random weights from config.json")
    p.add_argument("--device", default="cpu")
    p.add_argument("--kda-layers", default=G16, help=f"0-based KDA layers (default {G16})")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--seqs", type=int, default=192, help="sequences (topics set: 192)")
    p.add_argument("--min-len", type=int, default=60)
    p.add_argument("--max-len", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    teacher = _model(a.model, a.random, a.device)
    student = _model(a.model, a.random, a.device)
    if a.random:
        student.load_state_dict(teacher.state_dict())
    layers = [int(x) for x in a.kda_layers.split(",")]
    kcfg = kda_config(student.config, list(range(student.config.num_hidden_layers)))
    kda = {
        i: init_kda_from_gqa(student.model.layers[i].self_attn, kcfg, i).to(a.device)
        for i in layers
    }
    g = torch.Generator().manual_seed(1)
    vocab = teacher.config.vocab_size
    seqs = []
    for _ in range(a.seqs):
        n = int(torch.randint(a.min_len, a.max_len + 1, (1,), generator=g))
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        seqs.append((ids, [0] * (n // 3) + [1] * (n - n // 3)))  # reply scored, prompt not
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
    print(f"device {name}, torch {torch.__version__}, nproc {os.cpu_count()}, threads "
          f"{a.threads}, load {os.getloadavg()[0]:.2f}, {len(layers)} KDA layers, "
          f"{a.seqs} sequences of {a.min_len}-{a.max_len} tokens, "
          f"{'random' if a.random else 'checkpoint'} weights")  # fmt: skip
    print("| eval batch | seconds | scored tokens/s | KL | top-1 |")
    print("|---|---|---|---|---|")
    with torch.no_grad(), swapped(student, kda, torch.bfloat16):
        kl_metrics(teacher, student, seqs[:4], batch=4)  # warm-up: kernels, allocator
        for b in (int(x) for x in a.batches.split(",")):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            m = kl_metrics(teacher, student, seqs, batch=b)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"| {b} | {dt:.1f} | {m['tokens'] / dt:.0f} | {m['kl']:.4f} | {m['top1']:.2%} |")


if __name__ == "__main__":
    main()
