"""The teacher's share of one `distill timed` evaluation: re-run vs kept hidden states.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/timed_eval_reference.py runs/k3smol-g16

Why: until session 39 each CPU evaluation (166 s) re-ran the teacher on the 192-reply topics
set, whose logits were too large to keep, and kept the full logits of the smaller sets. `timed`
now runs the teacher once and keeps its final hidden states (`metrics.HeadLogits`); each
evaluation re-applies the head only. This times, on the run's own sets, one at a time as the
CPU evaluation scores them: the teacher forward over topics (the old per-evaluation cost), the
head over every set (the new one), and the one-time build; and prints what each keeps in memory.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch
from timing import median_seconds

from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.distill.metrics import HeadLogits
from k3chat_model.distill.pipeline import load_run
from k3chat_model.distill.timed import all_sets, evaluation_sets, reference_logits
from k3chat_model.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="timed repeats after a warm-up")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, _ = load_run(a.run)
    teacher = load_model(Path(cfg.teacher), dtype=torch.bfloat16).eval()
    tok = ChatTokenizer(Path(cfg.teacher))
    sets, val = evaluation_sets(a.run, cfg, teacher, tok, quiz=True)
    topics = [ids for ids, _ in val["topics"]]

    def rerun() -> None:
        with torch.no_grad():
            for ids in topics:
                teacher(torch.tensor([ids]))

    kept: dict[str, HeadLogits] = {}

    def build() -> None:
        kept.update(reference_logits(teacher, sets, val))

    def heads() -> None:
        for ref in kept.values():
            for j in range(len(ref)):
                ref[j]

    vocab = teacher.config.vocab_size
    positions = {k: sum(len(ids) for ids, _ in v) for k, v in all_sets(sets, val).items()}
    small = sum(n for k, n in positions.items() if k != "val_topics")
    print(f"nproc {os.cpu_count()}, threads {a.threads}, load {os.getloadavg()[0]:.2f}, "
          f"torch {torch.__version__}, {platform.machine()}")  # fmt: skip
    print(f"positions per set: {positions}; vocabulary {vocab}")
    t_rerun = median_seconds(rerun, a.repeats)
    t_build = median_seconds(build, a.repeats)
    t_heads = median_seconds(heads, a.repeats)
    hidden_mb = sum(h.numel() * h.element_size() for r in kept.values() for h in r.hidden) / 1e6
    print("| teacher work | seconds (median) | kept in memory |")
    print("|---|---|---|")
    print(f"| before, each evaluation: forward over topics | {t_rerun:.1f} | "
          f"{small * vocab * 2 / 1e9:.2f} GB (bf16 logits of the other sets) |")  # fmt: skip
    print(f"| now, each evaluation: head over every set | {t_heads:.1f} | "
          f"{hidden_mb:.0f} MB (final hidden states, all sets) |")  # fmt: skip
    print(f"| now, once per call: forward over every set | {t_build:.1f} | |")


if __name__ == "__main__":
    main()
