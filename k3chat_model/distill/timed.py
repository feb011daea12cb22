"""Stage 2 for a fixed wall-clock budget on any device (`distill timed`).

Why: stage 2 runs ~100 tok/s on a 2-core CPU. A GPU does orders of magnitude more, but is
often lent by the minute. So the token budget comes from the rate measured on a few real
steps, which makes the cosine schedule end at the deadline. Held-out KL/top-1 is measured a
few times, and the best snapshot is kept: at many more epochs over a small reply set the
student may start to overfit. It is chosen on selection sets held out from both training and
the gate (`validation.py`); the gate's own sets are only reported, so the full gate on the
exported delta stays an unbiased judge.

The result is written as `RUN/stage2-timed.pt`, a weights-only stage-2 checkpoint
(`distill rewind RUN RUN/stage2-timed.pt` makes it the run's current one), plus
`RUN/timed.json` with the rate and every evaluation.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from ..errors import ConfigError
from ..events import SamplingParams
from ..loading import load_model
from ..model import K3ForCausalLM
from . import ckpt
from .data import ChatTokenizer, interleave
from .experts import cast, load_routed, routed_state, trainable
from .factual_rows import factual_replies, factual_rows
from .gate import assistant_sequences, chat_sequences, heldout_assistant, kl_metrics
from .generate import fp32_on_slow_cpu, generate
from .metrics import HeadLogits, swapped
from .pipeline import RunConfig, load_hybrid, load_run, pretrained_lr_scale, stage2_rows
from .stage2 import Stage2Config, train_stage2
from .validation import quiz_set, validation_sets
from .weight_ema import WeightEMA

RESERVE_S = 0.06
"""Share of the budget kept for loading and the final save. Evaluations are priced apart: the
start evaluation is timed and the training budget leaves room for `evals` more like it
(session 34: on an H200 one took 78 s, against 6% of a 540 s budget)."""
MEASURE_STEPS = 6
# The kept weights, and the last evaluated ones when the rule kept an earlier step (`rewind`
# takes either).
KEPT_SNAPSHOT = "stage2-timed.pt"
LAST_SNAPSHOT = "stage2-timed-last.pt"


def _same_layers(a: dict, b: dict) -> bool:
    la, lb = a.get("layers", {}), b.get("layers", {})
    return la.keys() == lb.keys() and all(
        la[i].keys() == lb[i].keys() and all(torch.equal(la[i][n], lb[i][n]) for n in la[i])
        for i in la
    )


def set_aside_unrewound_snapshot(
    run: Path, log: Callable[[str], None] = print, name: str = KEPT_SNAPSHOT
) -> Path | None:
    """Rename an earlier `RUN/stage2-timed.pt` (or `name`) that is not the run's current stage 2.

    Why: a timed run starts from `stage2.pt` and writes its own snapshot to `stage2-timed.pt`,
    so a kept snapshot never made current with `distill rewind` would be overwritten unseen
    (session 47 lost 1.37M tokens of training that way). Returns the new path, or None when
    there was nothing to keep (no snapshot, or the one `rewind` already made current).
    """
    path = run / name
    if not path.exists():
        return None
    try:
        earlier = ckpt.load(path)
        tokens = str(int(earlier["state"]["tokens"]))
    except Exception:  # noqa: BLE001 - an unreadable snapshot is still kept, never overwritten
        earlier, tokens = None, "unreadable"
    try:
        current = ckpt.load(run / "stage2.pt")
    except Exception:  # noqa: BLE001 - reported by the run's own load, with its hint
        current = None
    if earlier is not None and current is not None and _same_layers(earlier, current):
        return None
    stem = name.removesuffix(".pt")
    kept, n = run / f"{stem}-{tokens}.pt", 1
    while kept.exists():
        kept, n = run / f"{stem}-{tokens}-{n}.pt", n + 1
    path.rename(kept)
    log(f"an earlier timed snapshot ({tokens} tokens) was never rewound: kept as {kept.name}; "
        f"`distill rewind {run} {kept}` continues from it")  # fmt: skip
    return kept


def timed_stage2(
    run: Path,
    *,
    device: str,
    seconds: float,
    batch: int = 32,
    lr: float = 3e-4,
    top1_weight: float = 0.2,
    tvd_weight: float = 0.0,
    evals: int = 4,
    teacher_dir: Path | None = None,
    data_dir: Path | None = None,
    fresh_replies: int = 0,
    replies_per_chat: int = 1,
    seed: int = 101,
    gen_batch: int = 256,
    keep: str = "best",
    pretrained_scale: float | None = None,
    pretrained_train: list[int] | None = None,
    factual: int = 0,
    factual_every: int = 2,
    train_experts: list[int] | None = None,
    expert_lr_scale: float = 1.0,
    ema: float = 0.0,
    eval_batch: int | None = None,
    log: Callable[[str], None] = print,
    stop: ckpt.StopFlag | None = None,
) -> dict:
    """Continue the run's stage 2 on `device` for about `seconds`; returns the report.

    `fresh_replies` > 0 first samples that many new teacher replies (see
    `sample_fresh_replies`) and adds them to the reply rows; the budget covers their generation.
    The training rows are shuffled with `seed` (`stage2_rows(order_seed=)`), so a budget
    shorter than one pass samples all of them, not the same first rows each run.
    `replies_per_chat` reply rows follow each chat row (default 1: half the rows are replies);
    more tilts training toward the assistant text that the topics and assistant sets score.
    `keep="last"` writes the last evaluated snapshot instead of the best: for a run whose gains
    lie where the selection sets do not look (e.g. factual answers after `distill restore`).
    `keep="topics"` ranks on the topics selection set alone: the largest (~22k tokens), so the
    least noisy reading; "best" ranks on the worst of three sets and so follows the noisiest.
    `pretrained_scale` (default: the run's `stage2_pretrained_lr_scale`) multiplies `lr`
    for the layers a grown run took already trained from `init_from`; with
    `pretrained_train`, only those of them train and the others are frozen.
    `factual` > 0 adds rows of that many one-line questions with the teacher's greedy answers
    (`factual_rows`), one after every `factual_every` rows, and scores the quiz selection set
    too (reported; the snapshot is still chosen on chat and assistant text).
    `train_experts` (layers): their routed experts train too, at `expert_lr_scale` × `lr`
    (`experts.py`); experts the run's checkpoint trained already always go on training.
    `ema` in (0, 1): also keep an exponential moving average of the trained weights with that
    decay (`weight_ema.py`); each evaluation scores it beside the live weights (under "ema")
    and the snapshot may be either, whichever scores better (`best_source` in the report).
    `eval_batch`: sequences per forward in each evaluation (`gate.kl_metrics`); by default 32
    on a GPU, where one at a time is launch-bound, and 1 elsewhere, as the gate measures.
    Stopped early (`stop`, e.g. Ctrl-C), it still writes the best (or last) snapshot so far;
    and each evaluation that changes the snapshot writes it at once (with the report so far,
    `"partial": true`), so a run killed outright (a timeout, the machine taken back) keeps it.
    If the steps slow down after the rate was measured, the run evaluates early once only an
    evaluation and the reserve still fit, and stops there (`"deadline": true` in the report).
    When the kept step is not the last one evaluated, the last weights are written as well, to
    `RUN/stage2-timed-last.pt`, so a near-tie can be settled by hand.
    The run's own checkpoints are never modified, and an earlier `stage2-timed.pt` (or
    `-last.pt`) that was never rewound is renamed first (`set_aside_unrewound_snapshot`).
    """
    if not (ema == 0.0 or 0.0 < ema < 1.0):
        raise ConfigError(f"--ema {ema}: need a decay in (0, 1), or 0 for none",
                          hint="e.g. --ema 0.99 averages over about the last 100 steps")  # fmt: skip
    if replies_per_chat < 1:
        raise ConfigError(f"--replies-per-chat {replies_per_chat}: need at least 1")
    if factual < 0 or factual_every < 1:
        raise ConfigError(
            f"--factual {factual} --factual-every {factual_every}: need N >= 0 and every >= 1"
        )
    t_end = time.time() + seconds
    if eval_batch is None:
        eval_batch = 32 if torch.device(device).type == "cuda" else 1
    if eval_batch < 1:
        raise ConfigError(f"--eval-batch {eval_batch}: need at least 1 sequence per forward")
    # after the argument checks: a typo moves nothing
    for name in (KEPT_SNAPSHOT, LAST_SNAPSHOT):
        set_aside_unrewound_snapshot(run, log, name)
    cfg, st = load_run(run)
    lr_scale = pretrained_lr_scale(cfg, st, pretrained_scale, pretrained_train)
    teacher_dir = Path(teacher_dir or cfg.teacher)
    data_dir = Path(data_dir or cfg.data_dir)
    tok = ChatTokenizer(teacher_dir)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16).to(device).eval()
    students, student = load_hybrid(run, teacher_dir, st["chosen"], "stage2.pt")
    start_ckpt = ckpt.load(run / "stage2.pt")
    experts = trainable(student, start_ckpt or ckpt.load(run / "stage1b.pt"), train_experts or [])
    student.to(device)
    extra = []
    if fresh_replies:
        pairs = sample_fresh_replies(run, teacher, tok, fresh_replies, seed, gen_batch, log)
        extra = [tok.conversation([("user", q), ("assistant", r)]) for q, r in pairs]
    rows, mask = stage2_rows(
        run, all_chat=True, extra=extra, order_seed=seed, replies_per_chat=replies_per_chat
    )
    if factual:
        triples = factual_replies(run, teacher, tok, factual, gen_batch, log)
        frows, fmask = factual_rows(tok, triples, rows.shape[1])
        order = torch.randperm(len(frows), generator=torch.Generator().manual_seed(seed))
        rows = interleave(rows, frows[order].to(rows.dtype), every=factual_every)
        mask = interleave(mask, fmask[order], every=factual_every)
        log(f"factual rows: {len(frows)} from {len(triples)} answers, 1 per {factual_every} rows")
    sets, val = evaluation_sets(
        run, replace(cfg, data_dir=str(data_dir)), teacher, tok, factual > 0
    )
    # The teacher runs once: each evaluation re-applies only its head to kept hidden states.
    ref = reference_logits(teacher, sets, val)

    def evaluate() -> dict:
        """KL/top-1 with the KDA layers in bf16 as they ship (as the gate runs them): on the
        gate's sets (reported) and on the selection sets (`val`, which choose the snapshot)."""
        dtype = teacher.model.embed_tokens.weight.dtype
        with swapped(student, students, dtype), cast(experts, dtype):
            res = {k: kl_metrics(teacher, student, v, ref[k], eval_batch) for k, v in sets.items()}
            res["val"] = {
                k: kl_metrics(teacher, student, v, ref["val_" + k], eval_batch)
                for k, v in val.items()
            }
            return res

    def weights() -> dict:
        """KDA layers (and trained experts, under "experts") as CPU copies."""
        out = {i: {k: v.detach().to("cpu", copy=True) for k, v in students[i].state_dict().items()}
               for i in students}  # fmt: skip
        return {"layers": out, "experts": {i: routed_state(m) for i, m in experts.items()}}

    t_eval = time.time()
    start = evaluate()
    eval_s = time.time() - t_eval
    log(f"start ({eval_s:.0f} s): {json.dumps(start)}")
    rate = _measure_rate(
        (teacher, student, students, rows, mask), batch, lr_scale, run, weights(), experts,
        losses=(top1_weight, tvd_weight),
    )  # fmt: skip
    one_eval_s = eval_s * (2 if ema else 1)  # with --ema each evaluation scores twice
    evals_s = evals * one_eval_s
    budget_s = t_end - time.time() - RESERVE_S * seconds - evals_s
    step_tokens = batch * rows.shape[1]
    steps = max(1, int(rate * budget_s / step_tokens))
    log(f"rate {rate:.0f} tok/s -> {steps} steps of {step_tokens} tokens in {budget_s:.0f} s "
        f"(+ {evals} evaluations, {evals_s:.0f} s)")  # fmt: skip
    eval_at = {round(steps * k / evals) for k in range(1, evals + 1)}
    report: dict = {"rate_tok_s": round(rate), "batch": batch, "lr": lr,
                    "lr_scale": lr_scale, "experts": sorted(experts),
                    "expert_lr_scale": expert_lr_scale,
                    "top1_weight": top1_weight, "tvd_weight": tvd_weight,
                    "eval_s": round(eval_s, 1), "start": start, "evals": []}  # fmt: skip
    score_of = _topics_score if keep == "topics" else _score
    best: dict = {"score": score_of(start), "weights": weights(), "step": 0, "source": "live"}
    # what the start weights saw in stage 2: none for a run stopped after stage 1b
    base = int(start_ckpt["state"]["tokens"]) if start_ckpt is not None else 0

    def write_snapshot(final: dict) -> None:
        """The kept weights as `RUN/stage2-timed.pt` and the report as `RUN/timed.json`."""
        chosen = next((e for e in report["evals"] if e["step"] == best["step"]), start)
        if best["source"] == "ema":
            chosen = {**chosen["ema"], "step": chosen["step"], "tokens": chosen["tokens"]}
        report.update(best_step=best["step"], best_source=best["source"], best=chosen, **final)
        ckpt.save_atomic(snapshot_of(best["weights"], chosen), run / KEPT_SNAPSHOT)
        ckpt.write_json(run / "timed.json", report)

    def snapshot_of(kept: dict, chosen: dict) -> dict:
        """A weights-only stage-2 checkpoint that `distill rewind` can make current."""
        state = {"step": 0, "tokens": base + chosen.get("tokens", 0), "cursor": 0,
                 "done": True, "loss": None, "timed": report}  # fmt: skip
        snapshot = {"layers": kept["layers"], "opt": None, "state": state}
        if experts:
            snapshot["experts"] = kept["experts"]
        return snapshot

    average = WeightEMA(students, experts, ema) if ema else None
    report["ema"] = ema

    # The step count comes from the rate measured at the start; a machine that slows later
    # (shared cores, a busier GPU) would overrun `seconds`, so past the point where only one
    # evaluation and the reserve still fit, the run evaluates once more and stops.
    guard = _Deadline(stop)
    last_call_s = one_eval_s + RESERVE_S * seconds

    def on_step(state: dict) -> None:
        if average is not None:
            average.update()
        late = state["step"] < steps and time.time() + last_call_s > t_end
        if late:
            guard.hit = True
            log(f"deadline: stopping at step {state['step']} of {steps}")
        if state["step"] in eval_at or late:
            record(state)

    def record(state: dict) -> None:
        res = evaluate()
        res["step"], res["tokens"] = state["step"], state["tokens"]
        source, score, snap = "live", score_of(res), weights
        if average is not None:
            with average.applied():
                res["ema"] = evaluate()
            if score_of(res["ema"]) > score:
                source, score, snap = "ema", score_of(res["ema"]), average.weights
        report["evals"].append(res)
        log(f"eval: {json.dumps(res)}")
        if keep == "last" or score > best["score"]:
            best.update(score=score, weights=snap(), step=state["step"], source=source)
            write_snapshot({"partial": True, "steps": state["step"], "tokens": state["tokens"]})

    state = _scratch_train(
        (teacher, student, students, rows, mask),
        Stage2Config(
            steps * step_tokens,
            batch=batch,
            lr=lr,
            warmup_steps=20,
            top1_weight=top1_weight,
            tvd_weight=tvd_weight,
            ckpt_seconds=1e9,
            lr_scale=lr_scale,
            expert_lr_scale=expert_lr_scale,
            compile_loss=True,  # full CPU chunks only; a no-op elsewhere
        ),
        run / "stage2-timed-train.pt",
        log_path=run / "train_log.jsonl",
        stop=guard,
        on_step=on_step,
        experts=experts,
    )
    write_snapshot(
        {
            "partial": False,
            "steps": state["step"],
            "tokens": state["tokens"],
            "stopped": not state["done"] and not guard.hit,
            "deadline": guard.hit,
            "seconds": round(seconds - (t_end - time.time())),
        }
    )
    last = report["evals"][-1] if report["evals"] else None
    if last is not None and last["step"] == state["step"] != best["step"]:
        # Why: the rule keeps one snapshot, and a near-tie on top-1 can hide a lower KL (session
        # 58 kept 85.44% over a last step at 85.42% with lower KL on every set, and lost it).
        # Written after the kept snapshot and report, so it can never cost them (disk full).
        try:
            ckpt.save_atomic(snapshot_of(weights(), last), run / LAST_SNAPSHOT)
        except OSError as e:
            log(f"the last evaluated weights (step {last['step']}) were not kept: {e}")
            return report
        report["last_snapshot"] = LAST_SNAPSHOT
        ckpt.write_json(run / "timed.json", report)
        log(f"the last evaluated weights (step {last['step']}) are kept too, as {LAST_SNAPSHOT}")
    return report


def evaluation_sets(
    run: Path, cfg: RunConfig, teacher: K3ForCausalLM, tok: ChatTokenizer, quiz: bool
) -> tuple[dict[str, list], dict[str, list]]:
    """The sets each evaluation scores: the gate's (reported) and the selection sets (which
    choose the snapshot; with `quiz`, the held-out quiz too, reported)."""
    sets = {
        "chat": chat_sequences(tok, Path(cfg.data_dir)),
        "assistant": assistant_sequences(tok, heldout_assistant(teacher, tok)),
    }
    val = validation_sets(run, cfg, teacher, tok)
    if quiz:
        val["quiz"] = quiz_set(run, teacher, tok)
    return sets, val


def reference_logits(
    teacher: K3ForCausalLM, sets: dict[str, list], val: dict[str, list]
) -> dict[str, HeadLogits]:
    """The teacher's logits for every evaluation set, keyed as `all_sets` keys them: one
    forward each now, only the head at each evaluation."""
    return {k: HeadLogits(teacher, [ids for ids, _ in v]) for k, v in all_sets(sets, val).items()}


def all_sets(sets: dict[str, list], val: dict[str, list]) -> dict[str, list]:
    """The gate's sets and the selection sets in one dict, the latter as `val_` + name."""
    return {**sets, **{"val_" + k: v for k, v in val.items()}}


def sample_fresh_replies(
    run: Path,
    teacher,  # noqa: ANN001
    tok: ChatTokenizer,
    n: int,
    seed: int,
    batch: int,
    log: Callable[[str], None] = print,
) -> list[list[str]]:
    """`n` new teacher replies (app default sampling, generator seed `seed`) to the run's
    training prompts, cycled: other samples of the same prompts, so more distinct reply text
    where the prompt pool is spent. Saved as `RUN/data/fresh_replies-<seed>.json`."""
    path = run / "data" / f"fresh_replies-{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    cfg, _ = load_run(run)
    source = run / "data" / "teacher_replies.json"
    if not source.is_file():
        raise ConfigError(f"{run}: no teacher replies whose prompts --fresh-replies could reuse",
                          hint="run the data phase first (`distill run RUN --until data`)")  # fmt: skip
    pool = [q for q, _ in json.loads(source.read_text())]
    random.Random(seed).shuffle(pool)  # the file is in generation order
    prompts = [pool[j % len(pool)] for j in range(n)]
    t0 = time.time()
    with fp32_on_slow_cpu(teacher):
        outs = generate(teacher, [tok.prompt(q) for q in prompts], cfg.gen_max_new,
                        SamplingParams(), tok.eos, seed=seed, batch=batch)  # fmt: skip
    pairs = [[q, tok.decode(o)] for q, o in zip(prompts, outs, strict=True)]
    ckpt.write_json(path, pairs)
    made = sum(len(o) for o in outs)
    log(f"fresh replies: {n} ({made} tokens) in {time.time() - t0:.0f} s")
    return pairs


class _Deadline:
    """The training loop's stop flag: the caller's (Ctrl-C), or the deadline guard's `hit`."""

    def __init__(self, user: ckpt.StopFlag | None) -> None:
        self.user, self.hit = user, False

    @property
    def stop(self) -> bool:
        return self.hit or bool(self.user and self.user.stop)


def _score(res: dict) -> tuple[float, float]:
    """On the selection sets: worst top-1 of chat, assistant and topics first (the gate's
    failing criterion), then lower worst KL. The quiz set is a different measure: reported."""
    v = [res["val"][k] for k in ("chat", "assistant", "topics") if k in res["val"]]
    return min(s["top1"] for s in v), -max(s["kl"] for s in v)


def _topics_score(res: dict) -> tuple[float, float]:
    """On the topics selection set alone: top-1 first, then lower KL (`keep="topics"`)."""
    t = res["val"]["topics"]
    return t["top1"], -t["kl"]


def _measure_rate(
    models: tuple,
    batch: int,
    lr_scale: dict[int, float],
    run: Path,
    saved: dict,
    experts: dict | None = None,
    losses: tuple[float, float] = (0.0, 0.0),
) -> float:
    """Tokens/s of real training steps (after two warm-up steps); weights are restored after.

    The steps train the same layers as the run will (`lr_scale`): frozen layers (scale 0) make
    a step much cheaper, and a rate measured with every layer training would end the cosine
    early. They use the run's loss weights (`losses`: top-1, TVD) and compiled loss, so the
    compilation falls in the warm-up steps and is not done again for the run."""
    _, _, students, rows, _ = models
    marks: list[float] = []
    _scratch_train(
        models,
        Stage2Config(
            MEASURE_STEPS * batch * rows.shape[1],
            batch=batch,
            lr=0.0,
            ckpt_seconds=1e9,
            lr_scale=lr_scale,
            top1_weight=losses[0],
            tvd_weight=losses[1],
            compile_loss=True,
        ),
        run / "stage2-timed-measure.pt",
        on_step=lambda s: marks.append(time.time()) if s["step"] >= 2 else None,
        experts=experts,
    )
    for i, mod in students.items():
        mod.load_state_dict(saved["layers"][i])  # copies into the parameters
    for i, moe in (experts or {}).items():
        load_routed(moe, saved["experts"][i])
    return (len(marks) - 1) * batch * rows.shape[1] / max(marks[-1] - marks[0], 1e-6)


def _scratch_train(models: tuple, cfg: Stage2Config, scratch: Path, **kw) -> dict:  # noqa: ANN003
    """`train_stage2` from the weights in memory, checkpointing to a throwaway file."""
    scratch.unlink(missing_ok=True)
    try:
        return train_stage2(*models, cfg, scratch, **kw)
    finally:
        scratch.unlink(missing_ok=True)
