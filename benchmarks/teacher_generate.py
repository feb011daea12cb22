"""Batched teacher generation (`distill.generate`), as the pipeline makes training replies.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/teacher_generate.py ~/.cache/k3chat/models/k3-smol-teacher

Why: every new teacher reply a CPU session wants for stage 2 costs generation first, and at
61-94 tok/s (sessions 12-28) a pool of 1,500 new replies took 30-45 minutes. Session 38's profile
of one batch-48 group found two costs that were not the model: the prefill's last-position head
(a strided slice that made matmul copy the 28M-parameter head once per row: ~5 s a group) and
the sampler's full-vocabulary `torch.where` for the repetition penalty (~33 ms a step); and
rows that had finished went on decoding until the batch's longest reply did. This times the old
forward and sampler without dropping finished rows ("before"), the new forward and sampler
alone, and the current code, alternating, on one group of `--batch` prompts of equal token
length in the pipeline's own templates, up to `--new` tokens each (the pipeline's 160, ending
at the end-of-message token), and prints a markdown table of medians. The last rows time the
current code with fp32 weights, which the pipeline uses on CPUs without native bf16: row-major
as session 52 made them, and column-major as session 54 does (`fp32_on_slow_cpu`). On a CPU
with native bf16 those two rows run bf16; the `forced-fp32` case makes the column-major fp32
weights there too (`K3CHAT_CPU_BF16=fp32` for its duration), to tell whether native bf16 wins.
`--cases` picks a subset, e.g. `--cases now,forced-fp32`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill import generate as generate_module
from k3chat_model.distill.data import TEMPLATES, TOPICS, ChatTokenizer
from k3chat_model.distill.generate import fp32_on_slow_cpu, generate
from k3chat_model.events import SamplingParams
from k3chat_model.layers.linear import MODE_ENV, cpu_bf16_is_slow
from k3chat_model.loading import load_model
from k3chat_model.model import CausalLMOutput, K3ForCausalLM

FP32_ROWS = "fp32 weights where bf16 is slow, row-major (`fp32_on_slow_cpu(column_major=False)`)"
FP32 = "now, fp32 column-major weights where bf16 is slow (`fp32_on_slow_cpu`; as bf16 elsewhere)"
FORCED = "fp32 column-major weights on any CPU (`K3CHAT_CPU_BF16=fp32`, `fp32_on_slow_cpu`)"
NOW = "now (finished rows dropped)"
SHORT = {"before": "before (strided head, full-vocabulary sampler, finished rows kept)",
         "kept": "head and sampler fixed, finished rows kept", "now": NOW,
         "fp32-rows": FP32_ROWS, "fp32": FP32, "forced-fp32": FORCED}  # fmt: skip


def _old_candidates(logits: torch.Tensor, params: SamplingParams, recent: torch.Tensor):  # noqa: ANN202
    """The sampler as it was: the penalty through a [B, V] mask and two full-vocabulary
    `where`s, and the temperature dividing the whole vocabulary."""
    logits, penalty = logits.float(), params.repetition_penalty
    if penalty != 1.0 and recent.numel():
        seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, recent, True)
        logits = torch.where(
            seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits
        )
    if params.temperature <= 0:
        top = logits.argmax(-1, keepdim=True)
        return torch.ones_like(top, dtype=torch.float32), top
    logits = logits / params.temperature
    k = params.top_k if params.top_k and params.top_k < logits.shape[-1] else logits.shape[-1]
    values, order = torch.topk(logits, k)
    probs = torch.softmax(values, dim=-1)
    if 0 < params.top_p < 1:
        drop = probs.cumsum(-1) - probs > params.top_p
        probs = probs.masked_fill(drop, 0)
    return probs, order


def _strided_forward(self, input_ids, cache=None, num_logits=None) -> CausalLMOutput:  # noqa: ANN001
    """The forward as it was: the head on the strided last-position slice."""
    h = self.model(input_ids, cache)
    if num_logits is not None:
        h = h[:, -num_logits:]
    return CausalLMOutput(self.lm_head(h))


@contextmanager
def keep_finished_rows() -> None:
    """Finished rows decode on until the batch is done, as before session 38."""
    drop = generate_module.DROP_FINISHED_AT
    generate_module.DROP_FINISHED_AT = 2.0
    try:
        yield
    finally:
        generate_module.DROP_FINISHED_AT = drop


@contextmanager
def before() -> None:
    """The old forward and sampler, and finished rows kept, for the duration."""
    sampler, forward = generate_module.candidates, K3ForCausalLM.forward
    generate_module.candidates, K3ForCausalLM.forward = _old_candidates, _strided_forward
    try:
        with keep_finished_rows():
            yield
    finally:
        generate_module.candidates, K3ForCausalLM.forward = sampler, forward


@contextmanager
def forced_fp32(model: K3ForCausalLM) -> None:
    """`fp32_on_slow_cpu` as if this CPU had no native bf16 (the detection is cached: cleared
    on the way in and out)."""
    old = os.environ.get(MODE_ENV)
    os.environ[MODE_ENV] = "fp32"
    cpu_bf16_is_slow.cache_clear()
    try:
        with fp32_on_slow_cpu(model):
            yield
    finally:
        if old is None:
            os.environ.pop(MODE_ENV, None)
        else:
            os.environ[MODE_ENV] = old
        cpu_bf16_is_slow.cache_clear()


def same_length_prompts(tok: ChatTokenizer, n: int) -> list[list[int]]:
    """`n` pipeline-style prompts that all have the most common token length."""
    by_len: dict[int, list[list[int]]] = {}
    for topic in TOPICS:
        for t in TEMPLATES:
            ids = tok.prompt(t.format(t=topic))
            by_len.setdefault(len(ids), []).append(ids)
    group = max(by_len.values(), key=len)
    if len(group) < n:
        raise SystemExit(f"only {len(group)} prompts share a length; use --batch {len(group)}")
    return group[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("teacher", type=Path, help="teacher-equivalent k3-smol checkpoint dir")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--new", type=int, default=160, help="most tokens generated per prompt")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default="before,kept,now,fp32-rows,fp32",
                    help=f"subset of {','.join(SHORT)}")  # fmt: skip
    a = ap.parse_args()
    unknown = [c for c in a.cases.split(",") if c and c not in SHORT]
    if unknown:
        ap.error(f"--cases: unknown {','.join(unknown)} (choose from {','.join(SHORT)})")
    torch.set_num_threads(a.threads)
    tok = ChatTokenizer(a.teacher)
    teacher = load_model(a.teacher, dtype=torch.bfloat16).eval()
    prompts = same_length_prompts(tok, a.batch)
    params = SamplingParams()
    stop = tok.eos
    generate(teacher, prompts[:4], 4, params, stop, batch=a.batch)  # warm-up
    every = {
        SHORT["before"]: before,
        SHORT["kept"]: keep_finished_rows,
        NOW: nullcontext,
        FP32_ROWS: lambda: fp32_on_slow_cpu(teacher, column_major=False),
        FP32: lambda: fp32_on_slow_cpu(teacher),
        FORCED: lambda: forced_fp32(teacher),
    }
    chosen = {SHORT[c] for c in a.cases.split(",") if c} | {NOW}
    cases = {k: v for k, v in every.items() if k in chosen}
    times: dict[str, list[float]] = {k: [] for k in cases}
    outs: dict[str, list[list[int]]] = {}
    for _ in range(a.rounds):
        for name, ctx in cases.items():
            with ctx():
                t0 = time.perf_counter()
                outs[name] = generate(teacher, prompts, a.new, params, stop, seed=5, batch=a.batch)
                times[name].append(time.perf_counter() - t0)
    same = len({str(o) for k, o in outs.items() if k not in (FP32, FP32_ROWS, FORCED)}) == 1
    print(f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
          f"torch {torch.__version__}, {platform.machine()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}")  # fmt: skip
    made = sum(len(o) for o in outs[NOW])
    longest = max(len(o) for o in outs[NOW])
    print(f"one group of {a.batch} prompts ({len(prompts[0])} tokens), up to {a.new} new tokens "
          f"each (made {made}, longest {longest}), app default sampling; {a.rounds} rounds, "
          f"alternating; same tokens in the bf16 rows: {same}; the fp32 rows sample their own "
          f"(their products differ in rounding only), so their tok/s counts their own tokens\n")  # fmt: skip
    print("| code | group, s (median) | reply tok/s |")
    print("|---|---|---|")
    for name, ts in times.items():
        s = statistics.median(ts)
        print(f"| {name} | {s:.2f} | {sum(len(o) for o in outs[name]) / s:.0f} |")


if __name__ == "__main__":
    main()
