"""`k3chat model distill …`: run/resume a distillation, show its status, gate it, ship a delta.

distill run    RUN [--teacher DIR] [--data-dir DIR] [--layers N] [--keep 1,2] [--stage1-tokens N] …
distill status RUN
distill gate   RUN [--delta FILE]
distill ship   RUN [--dest DIR]
distill rewind RUN CKPT
distill timed  RUN --device cuda --seconds S [--fresh-replies N] [--batch N] [--lr X] …
distill attribute RUN [--set chat|assistant|topics|quiz|both|all] [--selection] [--add-from RUN2]
distill restore RUN NEW --layers 19,22
distill seed   RUN [--delta FILE] [--teacher DIR]
distill window RUN --tokens N [--span S] [--lr X] [--adapt-lr-scale F]

Every command but `status` holds its run (and `restore` its NEW run) for its duration
(`run_lock.py`): a second command on a run in use stops at once with a one-line error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from ..errors import ConfigError, K3Error

DEFAULT_DEST = Path(__file__).resolve().parents[1] / "deltas"


def _layer_list(flag: str, text: str) -> list[int]:
    """Parse "24,25,26"; a malformed list is a one-line error (exit 2), not a traceback."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: expected comma-separated layer numbers") from e


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="k3chat model distill", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start or resume a run (resumes from its last checkpoint)")
    r.add_argument("run_dir", type=Path)
    r.add_argument(
        "--teacher",
        help="teacher checkpoint dir (default: build/find the teacher-equivalent k3-smol)",
    )
    r.add_argument(
        "--data-dir",
        default="/tmp/k3distill-data",
        help="folder with the chitchat-dataset and chatterbot-corpus wheels",
    )
    r.add_argument("--layers", type=int, help="number of KDA layers in the hybrid")
    r.add_argument(
        "--keep", help="comma-separated 0-based layers that must be KDA (an earlier milestone)"
    )
    r.add_argument("--init-from", help="earlier run dir whose trained KDA layers start this run")
    r.add_argument("--candidates", help="comma-separated 0-based candidate layers (default 3..29)")
    r.add_argument(
        "--stage1-from",
        help="run dir whose stage1.pt starts stage 1 of the layers --init-from lacks "
        "(continue a long many-candidate stage 1 instead of starting over)",
    )
    r.add_argument(
        "--stage1-in-context",
        action="store_true",
        default=None,
        help="stage 1 and 1b capture the teacher's attention with the --init-from layers swapped "
        "in (new layers learn the stream of the hybrid they join)",
    )
    for name in (
        "stage1-tokens",
        "stage1b-tokens",
        "stage2-tokens",
        "gen-prompts",
        "gen-batch",
        "student-prompts",
        "threads",
    ):
        r.add_argument(f"--{name}", type=int)
    for name in ("stage1-lr", "stage2-lr"):
        r.add_argument(f"--{name}", type=float, help="peak learning rate")
    r.add_argument(
        "--stage2-pretrained-lr-scale",
        type=float,
        help="stage-2 LR of kept layers that --init-from trained through stage 2, as a "
        "fraction of --stage2-lr (default 1; 0 freezes them, and the backward then stops at "
        "the lowest layer that trains)",
    )
    r.add_argument(
        "--stage2-top1-weight",
        type=float,
        help="weight of cross-entropy on the teacher's argmax added to stage 2's KL (default 0)",
    )
    r.add_argument("--until", choices=["data", "stage1", "stage1b"], help="stop after this phase")
    s = sub.add_parser("status", help="phases done, tokens, last progress line")
    s.add_argument("run_dir", type=Path)
    g = sub.add_parser("gate", help="export the delta and run the quality gate on it")
    g.add_argument("run_dir", type=Path)
    g.add_argument("--fast", action="store_true", help="KL/top-1 only (skip generation checks)")
    g.add_argument("--threads", type=int, help="torch threads (default: the run's)")
    sh = sub.add_parser(
        "ship", help="copy a gate-passing delta into the package (more KDA layers only)"
    )
    sh.add_argument("run_dir", type=Path)
    sh.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    rw = sub.add_parser(
        "rewind",
        help="make a kept stage-2 checkpoint the current one (the replaced one is kept); "
        "`run --stage2-tokens N` then continues from it",
    )
    rw.add_argument("run_dir", type=Path)
    rw.add_argument("checkpoint", type=Path)
    rs = sub.add_parser(
        "restore",
        help="copy the run as NEW with some KDA layers put back to softmax attention "
        "(fewer KDA layers, no retraining); gate and ship NEW like any run",
    )
    rs.add_argument("run_dir", type=Path)
    rs.add_argument("new_dir", type=Path)
    rs.add_argument("--layers", required=True, help="comma-separated 0-based KDA layers")
    sd = sub.add_parser(
        "seed",
        help="a run holding a delta (default: the shipped one) as its finished stage 2: "
        "continue it with `run --stage2-tokens N`, or grow it with `run NEW --init-from RUN`",
    )
    sd.add_argument("run_dir", type=Path)
    sd.add_argument("--delta", type=Path, help="delta file (default: the shipped delta)")
    sd.add_argument(
        "--teacher",
        type=Path,
        help="teacher checkpoint dir (default: build/find the teacher-equivalent k3-smol)",
    )
    sd.add_argument(
        "--data-dir",
        default="/tmp/k3distill-data",
        help="folder with the chitchat-dataset and chatterbot-corpus wheels",
    )
    at = sub.add_parser(
        "attribute",
        help="held-out KL/top-1 with each KDA layer put back to softmax attention, one at a time",
    )
    at.add_argument("run_dir", type=Path)
    at.add_argument(
        "--set",
        choices=["chat", "assistant", "topics", "quiz", "both", "all"],
        default="assistant",
        help="topics: teacher replies in the gate's assistant form on topics held out from "
        "both gate and training; quiz: the teacher's greedy answers to held-out one-line "
        "questions (the form of the gate's factual check); both: chat and assistant; all: "
        "the four",
    )
    at.add_argument(
        "--selection",
        action="store_true",
        help="measure on timed's selection sets, not the gate's (choose without the gate)",
    )
    at.add_argument(
        "--add-from",
        type=Path,
        metavar="RUN2",
        help="instead, add each layer of RUN2's stage1.pt (not already in the hybrid) to it, "
        "one at a time: the cost of growing by that layer, cheapest first",
    )
    at.add_argument(
        "--hybrid-only",
        action="store_true",
        help="score the hybrid alone on the set, no layer restored (one evaluation)",
    )
    at.add_argument("--threads", type=int, help="torch threads (default: the run's)")
    tm = sub.add_parser(
        "timed",
        help="continue stage 2 on a device for a fixed wall-clock budget; writes "
        "RUN/stage2-timed.pt (best held-out snapshot; the last one too, as "
        "stage2-timed-last.pt, when an earlier one was kept) and RUN/timed.json",
    )
    tm.add_argument("run_dir", type=Path)
    tm.add_argument("--device", default="cuda", help="torch device (default: cuda)")
    tm.add_argument("--seconds", type=float, required=True, help="wall-clock budget, all in")
    tm.add_argument("--batch", type=int, default=32, help="rows of 512 tokens per step")
    tm.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    tm.add_argument("--top1-weight", type=float, default=0.2, help="as `run --stage2-top1-weight`")
    tm.add_argument(
        "--tvd-weight",
        type=float,
        default=0.0,
        help="weight of the total variation distance to the teacher, added to the loss "
        "(it bounds top-1 disagreement; default 0)",
    )
    tm.add_argument(
        "--pretrained-lr-scale",
        type=float,
        help="LR multiplier of layers a grown run took trained from --init-from "
        "(default: the run's --stage2-pretrained-lr-scale)",
    )
    tm.add_argument(
        "--pretrained-train",
        metavar="LAYERS",
        help="only these of the --init-from layers train (at --pretrained-lr-scale); "
        "the others are frozen, e.g. 24,25,26,27,28,29",
    )
    tm.add_argument(
        "--train-experts",
        metavar="LAYERS",
        help="also train the routed experts (K3's LatentMoE path, off in the step-0 build) of "
        "these layers, e.g. 7,12,18,29; they ship in the delta (3 MB a layer in bf16)",
    )
    tm.add_argument(
        "--expert-lr-scale",
        type=float,
        default=1.0,
        help="LR multiplier of the routed experts that train (default 1)",
    )
    tm.add_argument(
        "--ema",
        type=float,
        default=0.0,
        metavar="DECAY",
        help="also average the trained weights (exponential moving average with this decay, "
        "e.g. 0.99); each evaluation scores the average too and the better may be kept",
    )
    tm.add_argument("--evals", type=int, default=4, help="held-out evaluations (best one kept)")
    tm.add_argument(
        "--keep",
        choices=["best", "topics", "last"],
        default="best",
        help="snapshot to write: best worst-of-three on the selection sets, best on the topics "
        "selection set alone (the largest, least noisy), or the last evaluated",
    )
    tm.add_argument(
        "--fresh-replies",
        type=int,
        default=0,
        help="first sample N new teacher replies to the run's prompts and train on them too",
    )
    tm.add_argument(
        "--replies-per-chat",
        type=int,
        default=1,
        metavar="K",
        help="teacher-reply rows after each chat row (default 1, half the rows; 2 gives "
        "two thirds, tilting training toward assistant text)",
    )
    tm.add_argument(
        "--factual",
        type=int,
        default=0,
        metavar="N",
        help="also train on the teacher's greedy answers to N one-line training questions "
        "(loss on the answer only; held out by subject from every factual check)",
    )
    tm.add_argument(
        "--factual-every",
        type=int,
        default=2,
        help="one factual row after every this many other rows (default 2)",
    )
    tm.add_argument(
        "--seed",
        type=int,
        default=101,
        help="seed of the fresh replies and of the training row order",
    )
    tm.add_argument("--gen-batch", type=int, default=256, help="prompts per generation batch")
    tm.add_argument(
        "--eval-batch",
        type=int,
        help="sequences per forward in evaluations (default: 32 on a GPU, 1 on the CPU)",
    )
    tm.add_argument("--teacher", type=Path, help="teacher dir (default: the run's)")
    tm.add_argument("--data-dir", type=Path, help="data dir (default: the run's)")
    wd = sub.add_parser(
        "window",
        help="stage 1w, after `run --until stage1b`: train the new KDA layers so the stream "
        "the layers above them read matches the hybrid the run grows from; the result "
        "replaces them in stage1b.pt (the old file is kept as stage1b-prewindow.pt)",
    )
    wd.add_argument("run_dir", type=Path)
    wd.add_argument("--tokens", type=int, required=True, help="training tokens")
    wd.add_argument(
        "--span", type=int, default=6, help="layers above each new one whose input is matched"
    )
    wd.add_argument("--lr", type=float, default=3e-4, help="peak learning rate")
    wd.add_argument("--batch", type=int, default=4, help="rows of 512 tokens per step")
    wd.add_argument(
        "--adapt-lr-scale",
        type=float,
        default=0.0,
        help="the --init-from layers between a new layer and the highest matched input train "
        "too, at this multiple of the LR (default 0: frozen)",
    )
    wd.add_argument("--threads", type=int, help="torch threads (default: the run's)")
    return p


def _window(a: argparse.Namespace) -> int:
    from .ckpt import StopFlag
    from .window import WindowConfig, window_run

    cfg = WindowConfig(a.tokens, span=a.span, lr=a.lr, batch=a.batch, adapt_scale=a.adapt_lr_scale)
    _hint_wait_policy(a.threads or 1)
    s = window_run(a.run_dir, cfg, StopFlag().install(), threads=a.threads)
    print(json.dumps({k: s[k] for k in ("step", "tokens", "done", "loss")}))
    return 0 if s["done"] else 130


def _timed(a: argparse.Namespace) -> int:
    import torch

    from .ckpt import StopFlag
    from .timed import timed_stage2

    try:
        dev = torch.device(a.device)
    except RuntimeError as e:
        raise ConfigError(f"unknown device {a.device!r}", hint="e.g. cuda, cuda:1 or cpu") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA GPU is visible", hint="use --device cpu")

    report = timed_stage2(
        a.run_dir,
        device=a.device,
        seconds=a.seconds,
        batch=a.batch,
        lr=a.lr,
        top1_weight=a.top1_weight,
        tvd_weight=a.tvd_weight,
        evals=a.evals,
        teacher_dir=a.teacher,
        data_dir=a.data_dir,
        fresh_replies=a.fresh_replies,
        replies_per_chat=a.replies_per_chat,
        factual=a.factual,
        factual_every=a.factual_every,
        keep=a.keep,
        pretrained_scale=a.pretrained_lr_scale,
        pretrained_train=(
            _layer_list("--pretrained-train", a.pretrained_train) if a.pretrained_train else None
        ),
        train_experts=(
            _layer_list("--train-experts", a.train_experts) if a.train_experts else None
        ),
        expert_lr_scale=a.expert_lr_scale,
        ema=a.ema,
        eval_batch=a.eval_batch,
        seed=a.seed,
        gen_batch=a.gen_batch,
        stop=StopFlag().install(),
    )
    print(json.dumps(report, indent=1))
    return 0


def _run(a: argparse.Namespace) -> int:
    from .ckpt import StopFlag
    from .pipeline import RunConfig, init_run, load_run, run_pipeline

    keep = _layer_list("--keep", a.keep) if a.keep else None  # before a new run dir is made
    if a.stage1_from:
        from .pipeline import read_stage1

        read_stage1(Path(a.stage1_from))  # a wrong one fails now, not after the data phase
    candidates = _layer_list("--candidates", a.candidates) if a.candidates else None
    if not (a.run_dir / "config.json").exists():
        teacher = a.teacher or _teacher_build()
        init_run(a.run_dir, RunConfig(teacher=str(teacher), data_dir=a.data_dir))
    cfg, _ = load_run(a.run_dir)
    over = {f.name: getattr(a, f.name) for f in fields(cfg) if getattr(a, f.name, None) is not None}
    if a.layers is not None:
        over["n_layers"] = a.layers
    if keep:
        over["keep_layers"] = keep
    if candidates:
        over["candidates"] = candidates
    if over:  # budgets of unfinished phases may be changed on resume
        from . import ckpt

        raw = json.loads((a.run_dir / "config.json").read_text())
        raw.update(over)
        ckpt.write_json(a.run_dir / "config.json", raw)
    _hint_wait_policy(cfg.threads if a.threads is None else a.threads)
    st = run_pipeline(a.run_dir, StopFlag().install(), until=a.until)
    print(json.dumps({"done": st["done"]}))
    return 0


def _hint_wait_policy(threads: int) -> None:
    """k3chat_model defaults OpenMP to sleeping idle threads (right for the app on a shared
    machine); a training step with 2 threads ran ~1.4x faster with spinning ones (docs/k3-smol.md)."""
    import os

    if threads > 1 and os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        print(
            "k3chat: note: OMP_WAIT_POLICY=PASSIVE; on an otherwise idle machine start with "
            "OMP_WAIT_POLICY=ACTIVE for faster multi-threaded training",
            file=sys.stderr,
        )


def _status(a: argparse.Namespace) -> int:
    from .pipeline import load_run

    cfg, st = load_run(a.run_dir)
    print(
        json.dumps({"done": st["done"], **{k: v for k, v in st.items() if k != "done"}}, indent=1)
    )
    log = a.run_dir / "train_log.jsonl"
    if log.exists():
        lines = log.read_text().splitlines()
        if lines:
            print("last:", lines[-1])
    return 0


def _gate(a: argparse.Namespace) -> int:
    from .gate import gate_run

    report = gate_run(a.run_dir, fast=a.fast, threads=a.threads)
    print(json.dumps(report, indent=1))
    return 0 if report["passed"] else 1


def _ship(a: argparse.Namespace) -> int:
    from .ship import ship

    print(ship(a.run_dir, a.dest))
    return 0


def _rewind(a: argparse.Namespace) -> int:
    from .rewind import rewind_stage2

    st = rewind_stage2(a.run_dir, a.checkpoint)
    print(json.dumps({"done": st["done"], "stage2_tokens": st["stage2_tokens"]}))
    return 0


def _restore(a: argparse.Namespace) -> int:
    from .restore import restore_layers

    st = restore_layers(a.run_dir, a.new_dir, _layer_list("--layers", a.layers))
    print(json.dumps({"run": str(a.new_dir), "kda_layers": st["chosen"]}))
    return 0


def _seed(a: argparse.Namespace) -> int:
    from ..default_model import DELTA_ENV, shipped_delta
    from .seed import seed_run

    delta, digest = a.delta, None
    if delta is None:
        shipped = shipped_delta()
        if shipped is None:
            raise ConfigError(
                "no shipped delta to seed from", hint=f"pass --delta, or unset {DELTA_ENV}"
            )
        delta, digest, _ = shipped
    st = seed_run(a.run_dir, delta, a.teacher or _teacher_build(), a.data_dir, digest)
    print(json.dumps({"run": str(a.run_dir), "kda_layers": st["chosen"]}))
    return 0


def _teacher_build() -> Path:
    """The teacher-equivalent k3-smol (built once, beside the app's; no delta applied): the
    default build carries the shipped hybrid, which must not teach its successor."""
    from ..default_model import ensure_default_model

    return ensure_default_model(teacher=True)


def _attribute(a: argparse.Namespace) -> int:
    from .attribute import attribute_run, format_report

    if a.hybrid_only and a.add_from:
        raise ConfigError("--hybrid-only and --add-from exclude each other")
    report = attribute_run(a.run_dir, a.set, a.threads, a.selection, a.add_from, a.hybrid_only)
    print(format_report(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point for `k3chat model distill`; returns the exit code (errors as one line)."""
    a = _parser().parse_args(argv)
    try:
        commands = {
            "run": _run,
            "status": _status,
            "gate": _gate,
            "ship": _ship,
            "rewind": _rewind,
            "attribute": _attribute,
            "restore": _restore,
            "timed": _timed,
            "seed": _seed,
            "window": _window,
        }
        if a.cmd == "status":  # reads only
            return commands[a.cmd](a)
        from .run_lock import run_lock

        with run_lock(a.run_dir, *([a.new_dir] if a.cmd == "restore" else [])):
            return commands[a.cmd](a)
    except K3Error as e:
        print(f"k3chat: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
