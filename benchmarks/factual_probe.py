"""Held-out factual accuracy of hybrids, compared question by question. One row per run.

    python benchmarks/factual_probe.py RUN [RUN ...] [--threads 2] [--out answers.json]

Each run's hybrid as it would ship (`gate.delta_student`) answers `quiz.WIDE_FACTUAL` greedily
(117 one-line questions the teacher answers right, none asked by the gate or trained on), scored
as the gate scores its own 30. Printed per run: the count, its 95% Wilson interval, the gate's
factual count from `gate.json` when that gate scored these same weights, and against the first
run the discordant pairs (questions only the first gets right / only this one gets right) with
an exact two-sided McNemar p. Why: between hybrids this close, which of the gate's 30 answers
flip is mostly chance (docs/k3-smol-sessions.md, session 16); a paired count over four times as many
questions says whether a hybrid really lost facts or was unlucky.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
from quiz_vs_factual import gate_factual

from k3chat_model.distill.data import ChatTokenizer
from k3chat_model.distill.gate import delta_student, factual_score
from k3chat_model.distill.pipeline import load_run
from k3chat_model.distill.quiz import WIDE_FACTUAL


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n (sound near 0 and 1, unlike k/n ± 2σ)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: under no difference, the b + c discordant questions split
    as fair coin flips."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write every answer here (JSON)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, _ = load_run(a.runs[0])
    teacher_dir = Path(cfg.teacher)
    tok = ChatTokenizer(teacher_dir)
    rows = []
    for run in a.runs:
        t0 = time.time()
        with delta_student(run, teacher_dir, keep_delta=False) as (student, path, manifest):
            n, detail = factual_score(student, tok, WIDE_FACTUAL)
            gate = gate_factual(run, path)
        rows.append({"run": run.name, "layers": len(manifest["kda_layers"]), "correct": n,
                     "gate": gate, "detail": detail, "seconds": round(time.time() - t0)})  # fmt: skip
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "detail"}), flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    total = len(WIDE_FACTUAL)
    base = [d["correct"] for d in rows[0]["detail"]]
    print(f"\nnproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
          f"{total} questions, greedy, 40 tokens; paired against {rows[0]['run']}")  # fmt: skip
    print(f"| run | KDA layers | correct /{total} | 95% interval | gate factual /30 "
          "| only first right | only this right | McNemar p |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = wilson(r["correct"], total)
        this = [d["correct"] for d in r["detail"]]
        b = sum(x and not y for x, y in zip(base, this, strict=True))
        c = sum(y and not x for x, y in zip(base, this, strict=True))
        gate = "-" if r["gate"] is None else r["gate"]
        print(f"| {r['run']} | {r['layers']} | {r['correct']} | {lo:.1%}–{hi:.1%} | {gate} "
              f"| {b} | {c} | {mcnemar_p(b, c):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
