"""Which converted layer costs the hybrid most: the gate's held-out KL and top-1 with each KDA
layer put back to the teacher's softmax attention, one at a time (issue 7).

The ranking (single-swap KL) measures a layer converted alone, before training. Once the layers
are trained together, a layer's cost is what the hybrid gains when that layer alone is restored.
When a milestone stalls below the gate, the layer with the largest gain is the one to train on
or to replace with the next-ranked candidate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..model import K3ForCausalLM
from .gate import Seq, kl_metrics


def leave_one_out(
    teacher: K3ForCausalLM, student: K3ForCausalLM, layers: list[int], seqs: list[Seq]
) -> dict:
    """{"hybrid": metrics, "restored": {layer: metrics with that layer's softmax attention back}}.

    `student` is the hybrid (KDA at `layers`, everything else the teacher's); its modules are
    swapped back in place and restored before returning.
    """
    with torch.no_grad():
        ref = [teacher(torch.tensor([ids])).logits for ids, _ in seqs]
    out: dict = {"hybrid": kl_metrics(teacher, student, seqs, ref), "restored": {}}
    for i in layers:
        kda = student.model.layers[i].self_attn
        student.model.layers[i].self_attn = teacher.model.layers[i].self_attn
        try:
            out["restored"][i] = kl_metrics(teacher, student, seqs, ref)
        finally:
            student.model.layers[i].self_attn = kda
    return out


def attribute_run(
    run: Path, which: str = "assistant", threads: int | None = None, selection: bool = False
) -> dict:
    """Leave-one-out on the run's exported delta (as the gate builds it); writes
    `RUN/attribution.json` (`attribution-selection.json` with `selection`) and returns it,
    layers sorted by the KL gained when restored.

    `selection` measures on `validation.py`'s sets instead of the gate's: what to restore can
    then be chosen without looking at the gate, which stays an unbiased judge of the result."""
    from ..loading import load_model
    from .data import ChatTokenizer
    from .gate import assistant_sequences, chat_sequences, delta_student, heldout_assistant
    from .pipeline import load_run
    from .validation import validation_sets

    cfg, st = load_run(run)
    torch.set_num_threads(threads or cfg.threads)
    teacher_dir = Path(cfg.teacher)
    tok = ChatTokenizer(teacher_dir)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)
    t0 = time.time()
    report: dict = {}
    with delta_student(run, teacher_dir, keep_delta=False) as (student, _, manifest):
        sets = {
            "chat": lambda: chat_sequences(tok, Path(cfg.data_dir)),
            "assistant": lambda: assistant_sequences(tok, heldout_assistant(teacher, tok)),
        }
        if selection:
            val = validation_sets(run, cfg, teacher, tok)
            sets = {k: (lambda k=k: val[k]) for k in sets}
        for name in ("chat", "assistant") if which == "both" else (which,):
            res = leave_one_out(teacher, student, st["chosen"], sets[name]())
            base = res["hybrid"]
            rows = [
                {
                    "layer": i,
                    "kl": m["kl"],
                    "top1": m["top1"],
                    "kl_gain": round(base["kl"] - m["kl"], 4),
                    "top1_gain": round(m["top1"] - base["top1"], 4),
                }
                for i, m in res["restored"].items()
            ]
            rows.sort(key=lambda r: -r["kl_gain"])
            report[name] = {
                "hybrid": base,
                "restored": rows,
            }
    report["layers"] = st["chosen"]
    report["stage2_tokens"] = manifest["tokens"]["stage2_tokens"]
    report["seconds"] = round(time.time() - t0)
    report["sets"] = "selection" if selection else "gate"
    name = "attribution-selection.json" if selection else "attribution.json"
    (run / name).write_text(json.dumps(report, indent=1) + "\n")
    return report


def format_report(report: dict) -> str:
    """A plain table per text set: layer (0-based), KL and top-1 with it restored, and gains."""
    lines = []
    for name in ("chat", "assistant"):
        if name not in report:
            continue
        h = report[name]["hybrid"]
        lines.append(
            f"{name}: hybrid KL {h['kl']:.4f}, top-1 {h['top1']:.2%} ({h['tokens']} tokens)"
        )
        lines.append("layer  KL restored  top-1 restored  KL gain  top-1 gain")
        for r in report[name]["restored"]:
            lines.append(
                f"{r['layer']:>5}  {r['kl']:>11.4f}  {r['top1']:>14.2%}  "
                f"{r['kl_gain']:>7.4f}  {r['top1_gain']:>+10.2%}"
            )
    return "\n".join(lines)
