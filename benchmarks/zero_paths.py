"""What the zero-query AttnRes and zero-output routed-expert shortcuts save on k3-smol.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/zero_paths.py ~/.cache/k3chat/models/k3-smol-teacher \
        --kda 4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29

k3-smol is a Llama rewritten into K3's layout: every AttnRes query is zero (the blend is a plain
mean) and every routed-expert up-projection is zero (the routed path adds nothing). The engine
now skips both (`layers/attnres.py: uniform_blend`, `layers/moe.py: routed_path_is_off`). This
times, side by side in one process and alternating, the shortcuts against the full computation
(the shortcuts patched out) on three workloads: a 2 x 512-token forward of the teacher (stage 2's
teacher pass, prefill), greedy decoding after a 256-token prompt through the cache (the app),
and one stage-2 training step of the hybrid with every KDA layer training (`train_stage2`,
batch 2 x 512, as `benchmarks/stage2_step.py`). Also checks the two give the same logits.
Prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config, swap_in
from k3chat_model.distill.metrics import inference_copy
from k3chat_model.layers import attnres
from k3chat_model.layers.moe import SparseMoE
from k3chat_model.loading import load_model

sys.path.insert(0, str(Path(__file__).parent))
from stage2_step import step_seconds  # noqa: E402
from timing import median_seconds  # noqa: E402


@contextlib.contextmanager
def full_computation():
    """Patch both shortcuts out: the engine as it was before them."""
    saved = SparseMoE.routed_path_is_off, attnres.AttnResSite.forward
    SparseMoE.routed_path_is_off = lambda self: False
    attnres.AttnResSite.forward = lambda self, prefix, blocks: attnres.attn_res(
        prefix, blocks, self.norm_weight, self.proj_weight, self.eps
    )
    try:
        yield
    finally:
        SparseMoE.routed_path_is_off, attnres.AttnResSite.forward = saved


@torch.no_grad()
def decode_seconds_per_token(model, prompt: torch.Tensor, n: int) -> float:  # noqa: ANN001
    cache = model.make_cache()
    nxt = model(prompt, cache, num_logits=1).logits[:, -1].argmax(-1, keepdim=True)
    t0 = time.perf_counter()
    for _ in range(n):
        nxt = model(nxt, cache).logits[:, -1].argmax(-1, keepdim=True)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="teacher-equivalent k3-smol checkpoint dir")
    ap.add_argument(
        "--kda",
        default="4,5,6,7,9,11,12,13,16,18,19,24,26,27,28,29",
        help="0-based layers of the hybrid (decode and stage 2)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of shortcut / full")
    ap.add_argument("--decode-tokens", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3, help="timed stage-2 steps per case and round")
    ap.add_argument("--skip-stage2", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    layers = [int(x) for x in a.kda.split(",") if x]
    teacher = load_model(a.teacher, dtype=torch.bfloat16).eval()
    student = load_model(a.teacher, dtype=torch.bfloat16)
    kcfg = kda_config(student.config, list(range(student.config.num_hidden_layers)))
    kda = {i: init_kda_from_gqa(student.model.layers[i].self_attn, kcfg, i) for i in layers}
    hybrid = load_model(a.teacher, dtype=torch.bfloat16).eval()
    swap_in(hybrid, {i: inference_copy(m, torch.bfloat16) for i, m in kda.items()})
    swap_in(student, kda)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, student.config.vocab_size, (2, 512), generator=g)
    prompt = rows[:1, :256]

    with torch.no_grad():
        fast = teacher(rows).logits.float()
        with full_computation():
            full = teacher(rows).logits.float()
    rel = ((fast - full).norm() / full.norm()).item()
    same_top1 = (fast.argmax(-1) == full.argmax(-1)).float().mean().item()

    cases = {
        "teacher forward, 2 x 512 (s)": lambda: median_seconds(lambda: teacher(rows), 3),
        "hybrid decode after 256 tokens (s/token)": lambda: decode_seconds_per_token(
            hybrid, prompt, a.decode_tokens
        ),
    }
    if not a.skip_stage2:
        cases["stage-2 step, 2 x 512, all KDA training (s)"] = lambda: step_seconds(
            teacher, student, kda, list(kda), rows, a.steps
        )
    times: dict[str, dict[str, list[float]]] = {k: {"shortcut": [], "full": []} for k in cases}
    for _ in range(a.rounds):
        for name, fn in cases.items():
            with torch.no_grad() if "stage-2" not in name else contextlib.nullcontext():
                times[name]["shortcut"].append(fn())
                with full_computation():
                    times[name]["full"].append(fn())

    print(
        f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
        f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
    )
    print(f"hybrid KDA layers {layers}; {a.rounds} alternating rounds, medians")
    print(
        f"teacher logits, shortcut vs full: relative difference {rel:.1e}, same argmax {same_top1:.2%}\n"
    )
    print("| workload | full | shortcuts | speed-up |")
    print("|---|---|---|---|")
    for name, t in times.items():
        f, s = statistics.median(t["full"]), statistics.median(t["shortcut"])
        print(f"| {name} | {f:.3f} | {s:.3f} | {f / s:.2f}x |")


if __name__ == "__main__":
    main()
