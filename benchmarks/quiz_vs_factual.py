"""Does the quiz selection set predict the gate's factual check? One row per distillation run.

    python benchmarks/quiz_vs_factual.py RUN [RUN ...] [--threads 2] [--n 12]

For each run, the hybrid as it would ship (`gate.delta_student`) is scored on the held-out quiz
set (`validation.quiz_set`: the teacher's greedy answers to `quiz.HELDOUT_QUIZ`): teacher-forced
KL and top-1 on the answer tokens, and greedy agreement (the share of questions whose first
`--n` greedy tokens begin the teacher's answer), and the held-out factual count (greedy
answers to `quiz.HELDOUT_FACTUAL`, scored as the gate scores its own). Beside them, the factual count from the run's
`gate.json` (the gate itself is not rerun; a count whose delta differs from the one scored
here, e.g. after a later `timed`, is left out as stale). Why: a selection metric earns its place only if it
moves with the check it stands in for, and the gate's 30 questions must not be used to choose.
Prints a table sorted by the factual count, and the Spearman rank correlation of each metric
with it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from k3chat_model.distill.gate import delta_student, factual_score, kl_metrics
from k3chat_model.distill.pipeline import run_teacher
from k3chat_model.distill.quiz import HELDOUT_FACTUAL
from k3chat_model.distill.validation import quiz_agreement, quiz_pairs, quiz_set


def ranks(xs: list[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions)."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def same_weights(a: Path, b: Path) -> bool:
    """Whether two delta files hold the same tensors (their metadata may differ: the source
    checkpoint's name and token counts)."""
    if not a.exists():
        return False
    ta, tb = load_file(str(a)), load_file(str(b))
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def gate_factual(run: Path, delta: Path) -> int | None:
    """The gate's factual count from `RUN/gate.json`, if that gate scored the weights `delta`
    holds (None if ungated, or if the run has trained since)."""
    if not (run / "gate.json").exists():
        return None
    gate = json.loads((run / "gate.json").read_text())
    if "delta" not in gate or not same_weights(run / "delta" / gate["delta"]["file"], delta):
        return None
    return gate.get("factual_correct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=12, help="greedy tokens compared per answer")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    teacher_dir, tok, teacher = run_teacher(a.runs[0])
    pairs = quiz_pairs(a.runs[0], teacher, tok)  # the teacher's; the same for every run
    seqs = quiz_set(a.runs[0], teacher, tok)
    with torch.no_grad():
        ref = [teacher(torch.tensor([ids])).logits for ids, _ in seqs]
    rows = []
    for run in a.runs:
        t0 = time.time()
        with delta_student(run, teacher_dir, keep_delta=False) as (student, path, manifest):
            factual = gate_factual(run, path)
            m = kl_metrics(teacher, student, seqs, ref)
            agree = quiz_agreement(student, tok, pairs, a.n)
            held = factual_score(student, tok, HELDOUT_FACTUAL)[0]
        rows.append({"run": run.name, "layers": len(manifest["kda_layers"]),
                     "factual": factual,
                     "gated": (run / "gate.json").exists(), "quiz_kl": m["kl"],
                     "quiz_top1": m["top1"], "quiz_agree": round(agree, 4), "heldout_factual": held,
                     "seconds": round(time.time() - t0)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nnproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
          f"{len(pairs)} questions, {m['tokens']} answer tokens, agreement on {a.n} tokens")  # fmt: skip
    print(f"| run | KDA layers | gate factual /30 | held-out factual /{len(HELDOUT_FACTUAL)} "
          "| quiz KL | quiz top-1 | quiz greedy agreement |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["factual"] is None, -(r["factual"] or 0))):
        fact = r["factual"] if r["factual"] is not None else ("stale" if r["gated"] else "-")
        print(f"| {r['run']} | {r['layers']} | {fact} | {r['heldout_factual']} | {r['quiz_kl']:.4f} | "
              f"{r['quiz_top1']:.2%} | {r['quiz_agree']:.2%} |")  # fmt: skip
    known = [r for r in rows if r["factual"] is not None]
    if len(known) >= 3:
        f = [r["factual"] for r in known]
        keys = (("heldout_factual", 1), ("quiz_kl", -1), ("quiz_top1", 1), ("quiz_agree", 1))
        for key, sign in keys:
            rho = spearman(f, [sign * r[key] for r in known])
            print(f"Spearman(factual, {'-' if sign < 0 else ''}{key}) = {rho:+.2f}")


if __name__ == "__main__":
    main()
