"""Where hybrids disagree with the teacher's top-1 token, binned by the teacher's own margin.

    OMP_WAIT_POLICY=ACTIVE python benchmarks/top1_margins.py RUN [RUN ...] [--set assistant]

Why: the gate's top-1 check (≥ 85%) is what holds 12-layer hybrids back, by 0.3–1 point: 10–40
of the assistant set's 3,844 scored tokens. This says which tokens those are. On the gate's own
sets (teacher and hybrids in bf16, each hybrid as it would ship, `gate.delta_student`), each
scored token is binned by the teacher's probability margin between its first and second choice
(p1 − p2). Printed: each bin's share of the tokens and every run's top-1 agreement in it, then,
against the first run, the tokens per bin that only the first run / only this run gets right,
and the top-1 difference with its 95% interval, paired (the same replies resampled for both).
`--set topics` scores the topics selection set instead (`validation.topic_set`: the gate's
assistant form, 192 replies on topics held out from gate and training; the first run's
`data/val_topics.json`, made there once): the gate's kind of text, six times as much of it,
without looking at the gate.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)

# isort: split
import torch

from k3chat_model.distill.gate import (
    assistant_sequences,
    chat_sequences,
    delta_student,
    heldout_assistant,
)
from k3chat_model.distill.metrics import bootstrap_ci
from k3chat_model.distill.pipeline import load_run, run_teacher
from k3chat_model.distill.validation import topic_set

EDGES = (0.0, 0.05, 0.1, 0.2, 0.4, 1.01)


@torch.no_grad()
def argmax_and_margin(model, seqs) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Top-1 token and p1 − p2 at every scored position of `seqs`, concatenated (as `kl_top1`
    scores them: the logits at t predict token t + 1, where the mask says it is scored)."""
    top, margin = [], []
    for ids, mask in seqs:
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
        keep = torch.tensor(mask[1:], dtype=torch.bool)
        p = logits[keep].softmax(-1)
        two = p.topk(2, dim=-1).values
        top.append(logits[keep].argmax(-1))  # ties go to the first index, as in the gate
        margin.append(two[:, 0] - two[:, 1])
    return torch.cat(top), torch.cat(margin)


def bins(margin: torch.Tensor) -> list[torch.Tensor]:
    """Exact ties (bf16 logits are coarse: 1/16 apart near 10) first, then the EDGES ranges."""
    ranges = [(margin >= lo) & (margin < hi) for lo, hi in zip(EDGES, EDGES[1:], strict=False)]
    return [margin == 0, ranges[0] & (margin > 0), *ranges[1:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--set", choices=("assistant", "chat", "topics"), default="assistant")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    teacher_dir, tok, teacher = run_teacher(a.runs[0])
    if a.set == "assistant":
        seqs = assistant_sequences(tok, heldout_assistant(teacher, tok))
    elif a.set == "topics":
        seqs = topic_set(a.runs[0], teacher, tok)
    else:
        seqs = chat_sequences(tok, Path(load_run(a.runs[0])[0].data_dir))
    t_top, t_margin = argmax_and_margin(teacher, seqs)
    masks = bins(t_margin)
    agree = {}
    for run in a.runs:
        with delta_student(run, teacher_dir, keep_delta=False) as (student, _, _):
            agree[run] = argmax_and_margin(student, seqs)[0] == t_top

    load = os.getloadavg()
    where = "selection" if a.set == "topics" else "gate's"
    print(f"nproc {os.cpu_count()}, load {load[0]:.2f}, torch {torch.__version__}, "
          f"{platform.python_version()}; {where} {a.set} set, {len(t_top)} scored tokens")  # fmt: skip
    names = [r.name for r in a.runs]
    print("\n| teacher p1 − p2 | tokens | " + " | ".join(f"{n} top-1" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    labels = ["tie"] + [
        f"({lo:.2f}, {min(hi, 1.0):.2f})" for lo, hi in zip(EDGES, EDGES[1:], strict=False)
    ]
    for label, m in zip(labels + ["all"], masks + [torch.ones_like(t_margin, dtype=torch.bool)],
                        strict=True):  # fmt: skip
        cells = [f"{100 * agree[r][m].float().mean():.2f}%" if m.any() else "–" for r in a.runs]
        print(f"| {label} | {int(m.sum())} | " + " | ".join(cells) + " |")
    first = a.runs[0]
    print(f"\nTokens only {first.name} / only this run gets right, by teacher margin:\n")
    print("| run | " + " | ".join(labels) + " | all (net) | top-1 change (95% CI, paired) |")
    print("|---|" + "---|" * (len(labels) + 2))
    per_seq = [sum(m[1:]) for _, m in seqs]
    for r in a.runs[1:]:
        lost, won = agree[first] & ~agree[r], agree[r] & ~agree[first]
        cells = [f"{int(lost[m].sum())} / {int(won[m].sum())}" for m in masks]
        net = int(won.sum()) - int(lost.sum())
        net_seq = [float(x.sum()) for x in (won.int() - lost.int()).split(per_seq)]
        lo, hi = bootstrap_ci(net_seq, per_seq)
        print(f"| {r.name} | " + " | ".join(cells) + f" | {int(lost.sum())} / {int(won.sum())} "
              f"({net:+d}) | {100 * net / len(t_top):+.2f} ({100 * lo:+.2f} to {100 * hi:+.2f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
