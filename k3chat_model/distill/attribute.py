"""Which converted layer costs the hybrid most: the gate's held-out KL and top-1 with each KDA
layer put back to the teacher's softmax attention, one at a time (issue 7).

The ranking (single-swap KL) measures a layer converted alone, before training. Once the layers
are trained together, a layer's cost is what the hybrid gains when that layer alone is restored.
When a milestone stalls below the gate, the layer with the largest gain is the one to train on
or to replace with the next-ranked candidate.

`add_one_in` is the converse, for growing: each candidate layer, trained by stage 1 in another
run, added to the hybrid alone. Why: the in-run ranking scores candidates on two rows after
whatever stage 1 they had; a candidate's cost after a *long* stage 1 differs (layer 4 cost a
fifth of what it had after a short one), and choosing the next layer should read it on the
selection sets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import ConfigError
from ..layers.kda import KimiDeltaAttention
from ..model import K3ForCausalLM
from .gate import Seq, kl_metrics
from .hybrid import init_kda_from_gqa, kda_config
from .metrics import swapped
from .quiz import HELDOUT_FACTUAL

if TYPE_CHECKING:
    from .data import ChatTokenizer

SET_NAMES = ("chat", "assistant", "topics", "quiz")
N_FACTUAL = len(HELDOUT_FACTUAL)
SET_GROUPS = {"both": ("chat", "assistant"), "all": SET_NAMES}


Probe = Callable[[K3ForCausalLM], dict]
"""Extra metrics of the model as it stands (e.g. the held-out factual count), merged into
each row."""


@contextmanager
def cache_kinds_of_modules(model: K3ForCausalLM) -> Iterator[K3ForCausalLM]:
    """`model` whose config names as KDA exactly the layers whose mixer is KDA now.

    Why: a generation cache is laid out from `config.kda_layers`; with a layer swapped, the
    config would hand a KV cache to a KDA layer (or a KDA state to softmax attention)."""
    cfg = model.config
    keep = cfg.kda_layers
    cfg.kda_layers = [
        i for i, layer in enumerate(model.model.layers)
        if isinstance(layer.self_attn, KimiDeltaAttention)
    ]  # fmt: skip
    try:
        yield model
    finally:
        cfg.kda_layers = keep


def _measure(
    teacher: K3ForCausalLM, student: K3ForCausalLM, seqs: list[Seq], ref: list, probe: Probe | None
) -> dict:
    m = kl_metrics(teacher, student, seqs, ref)
    if probe is not None:
        with cache_kinds_of_modules(student):
            m.update(probe(student))
    return m


def leave_one_out(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    layers: list[int],
    seqs: list[Seq],
    probe: Probe | None = None,
) -> dict:
    """{"hybrid": metrics, "restored": {layer: metrics with that layer's softmax attention back}}.

    `student` is the hybrid (KDA at `layers`, everything else the teacher's); its modules are
    swapped back in place and restored before returning.
    """
    with torch.no_grad():
        ref = [teacher(torch.tensor([ids])).logits for ids, _ in seqs]
    out: dict = {"hybrid": _measure(teacher, student, seqs, ref, probe), "restored": {}}
    for i in layers:
        kda = student.model.layers[i].self_attn
        student.model.layers[i].self_attn = teacher.model.layers[i].self_attn
        try:
            out["restored"][i] = _measure(teacher, student, seqs, ref, probe)
        finally:
            student.model.layers[i].self_attn = kda
    return out


def add_one_in(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    candidates: dict[int, nn.Module],
    seqs: list[Seq],
    probe: Probe | None = None,
) -> dict:
    """{"hybrid": metrics, "added": {layer: metrics with that candidate swapped in as well}}.

    Each candidate runs as it would ship (`swapped`: Linear weights in the teacher's dtype);
    `student` is left as it was."""
    with torch.no_grad():
        ref = [teacher(torch.tensor([ids])).logits for ids, _ in seqs]
    dtype = teacher.model.embed_tokens.weight.dtype
    out: dict = {"hybrid": _measure(teacher, student, seqs, ref, probe), "added": {}}
    for i, mod in sorted(candidates.items()):
        with swapped(student, {i: mod}, dtype):
            out["added"][i] = _measure(teacher, student, seqs, ref, probe)
    return out


def stage1_candidates(
    other: Path, teacher: K3ForCausalLM, exclude: list[int]
) -> tuple[dict[int, nn.Module], int]:
    """(KDA modules, stage-1 tokens): the layers in `other/stage1.pt` (its latest checkpoint,
    finished or not) that are not in `exclude`."""
    from .pipeline import fit_layer, read_stage1

    saved, tokens = read_stage1(other)
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    mods = {}
    for i in sorted(set(saved["layers"]) - set(exclude)):
        mods[i] = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        fit_layer(mods[i], saved["layers"][i], f"{other}: layer {i}")
    if not mods:
        raise ConfigError(f"{other}: every layer in its stage1.pt is already in the hybrid")
    return mods, tokens


def _change_rows(base: dict, per_layer: dict, kind: str) -> list[dict]:
    """Per layer: its KL and top-1, and the change against `base`, as a `gain` (layers
    restored: KL removed, top-1 won; largest first) or a `cost` (layers added: KL added,
    top-1 lost; smallest first). With a probe's held-out `factual` count, its change as well."""
    sign = 1 if kind == "gain" else -1
    rows = [
        {
            "layer": i,
            "kl": m["kl"],
            "top1": m["top1"],
            f"kl_{kind}": round(sign * (base["kl"] - m["kl"]), 4),
            f"top1_{kind}": round(sign * (m["top1"] - base["top1"]), 4),
        }
        | (
            {"factual": m["factual"], f"factual_{kind}": sign * (m["factual"] - base["factual"])}
            if "factual" in m
            else {}
        )
        for i, m in per_layer.items()
    ]
    return sorted(rows, key=lambda r: -sign * r[f"kl_{kind}"])


def _quiz_probe(tok: ChatTokenizer) -> Probe:
    """The held-out factual check: greedy answers to `quiz.HELDOUT_FACTUAL`, counted correct."""
    from .gate import factual_score

    return lambda m: {"factual": factual_score(m, tok, HELDOUT_FACTUAL)[0]}


def attribute_run(
    run: Path,
    which: str = "assistant",
    threads: int | None = None,
    selection: bool = False,
    add_from: Path | None = None,
    hybrid_only: bool = False,
) -> dict:
    """Leave-one-out on the run's exported delta (as the gate builds it); writes
    `RUN/attribution.json` (`attribution-selection.json` with `selection`) and returns it,
    layers sorted by the KL gained when restored.

    With `add_from`, add-one-in instead: each of that run's stage-1 layers added to this
    hybrid, cheapest first, written to `RUN/addition[-selection].json`.

    `selection` measures on `validation.py`'s sets instead of the gate's: what to restore can
    then be chosen without looking at the gate, which stays an unbiased judge of the result.
    The `topics` and `quiz` sets (`validation.topic_set`, `quiz_set`) are held out from both
    either way.

    `hybrid_only` scores the hybrid alone, none restored: one evaluation instead of one per
    layer, for a gating rule that reads a set's top-1 on the CPU (a device's kernels read
    differently, docs/k3-smol-sessions.md, session 7). Its report is `hybrid-<sets>.json`."""
    from ..loading import load_model
    from .data import ChatTokenizer
    from .gate import assistant_sequences, chat_sequences, delta_student, heldout_assistant
    from .pipeline import load_run
    from .validation import quiz_set, topic_set, validation_sets

    cfg, st = load_run(run)
    torch.set_num_threads(threads or cfg.threads)
    teacher_dir = Path(cfg.teacher)
    tok = ChatTokenizer(teacher_dir)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)
    t0 = time.time()
    report: dict = {}
    cands = None
    if add_from is not None:  # before the export: a wrong RUN2 fails fast
        cands, report["stage1_tokens"] = stage1_candidates(add_from, teacher, st["chosen"])
        report["added_from"] = str(add_from)
    with delta_student(run, teacher_dir, keep_delta=False) as (student, _, manifest):
        sets = {
            "chat": lambda: chat_sequences(tok, Path(cfg.data_dir)),
            "assistant": lambda: assistant_sequences(tok, heldout_assistant(teacher, tok)),
        }
        if selection:  # each set built when scored: only the asked ones are ever made
            sets = {k: (lambda k=k: validation_sets(run, cfg, teacher, tok, (k,))[k]) for k in sets}
        # held out from both, always: the gate's assistant form on other topics, and quiz
        sets["topics"] = lambda: topic_set(run, teacher, tok)
        sets["quiz"] = lambda: quiz_set(run, teacher, tok)
        for name in SET_GROUPS.get(which, (which,)):
            probe = _quiz_probe(tok) if name == "quiz" else None
            if cands is not None:
                res = add_one_in(teacher, student, cands, sets[name](), probe)
                rows = _change_rows(res["hybrid"], res["added"], "cost")
                report[name] = {"hybrid": res["hybrid"], "added": rows}
                continue
            layers = [] if hybrid_only else st["chosen"]
            res = leave_one_out(teacher, student, layers, sets[name](), probe)
            rows = _change_rows(res["hybrid"], res["restored"], "gain")
            report[name] = {"hybrid": res["hybrid"], "restored": rows}
    report["layers"] = st["chosen"]
    report["stage2_tokens"] = manifest["tokens"]["stage2_tokens"]
    report["seconds"] = round(time.time() - t0)
    report["sets"] = "selection" if selection else "gate"
    name = ("addition" if add_from is not None else "attribution") + (
        "-selection.json" if selection else ".json"
    )
    if hybrid_only:  # beside, not over, a full attribution of the same run
        name = f"hybrid-{which}" + ("-selection.json" if selection else ".json")
    (run / name).write_text(json.dumps(report, indent=1) + "\n")
    return report


def format_report(report: dict) -> str:
    """A plain table per text set: layer (0-based), KL and top-1 with it restored (or added),
    and their change; on the quiz set also the held-out factual count and its change."""
    lines = []
    for name in SET_NAMES:
        if name not in report:
            continue
        h = report[name]["hybrid"]
        fact = f", held-out factual {h['factual']}/{N_FACTUAL}" if "factual" in h else ""
        lines.append(
            f"{name}: hybrid KL {h['kl']:.4f}, top-1 {h['top1']:.2%}{fact} ({h['tokens']} tokens)"
        )
        kind, verb = ("cost", "added") if "added" in report[name] else ("gain", "restored")
        head = f"layer  KL {verb:>8}  top-1 {verb:>8}  KL {kind}  top-1 {kind}"
        lines.append(head + (f"  factual {kind}" if fact else ""))
        for r in report[name][verb]:
            row = (
                f"{r['layer']:>5}  {r['kl']:>11.4f}  {r['top1']:>14.2%}  "
                f"{r[f'kl_{kind}']:>7.4f}  {r[f'top1_{kind}']:>+10.2%}"
            )
            lines.append(row + (f"  {r[f'factual_{kind}']:>+12d}" if fact else ""))
    return "\n".join(lines)
