"""The quality gate a distilled k3-smol must pass before its delta may ship (issue 7).

On a fixed held-out set, against the teacher, both in bf16 as the app runs them:
- chat text (held-out chitchat conversations) and assistant-style text (teacher replies to
  held-out prompts, `heldout_assistant.json`): mean KL(teacher‖student) ≤ 0.15 nats/token and
  top-1 agreement ≥ 85% on each;
- ≥ 27 of the 30 `FACTUAL` prompts answered correctly (greedy);
- at the app's default sampling settings, no phrase (word 4-gram) occurs more than 3 times in
  up to 256 generated tokens, for each `LOOP_PROMPTS` prompt.
KL and top-1 count only positions predicting non-system tokens (assistant set: reply tokens).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from ..events import SamplingParams
from ..model import K3ForCausalLM
from .data import ChatTokenizer, chitchat_conversations, equal_length_prompts
from .gate_data import FACTUAL, HELDOUT_ASSISTANT_N, HELDOUT_TEMPLATES, HELDOUT_TOPICS, LOOP_PROMPTS
from .generate import generate
from .metrics import bootstrap_ci, kl_top1

MAX_KL = 0.15
MIN_TOP1 = 0.85
MIN_FACTUAL = 27
MAX_REPEATS = 3
LOOP_TOKENS = 256
CHAT_TOKENS = 3072
ASSISTANT_FILE = Path(__file__).with_name("heldout_assistant.json")

Seq = tuple[list[int], list[int]]


def chat_sequences(tok: ChatTokenizer, data_dir: Path, max_len: int = 512) -> list[Seq]:
    """Held-out chitchat conversations (never trained on), until CHAT_TOKENS scored tokens."""
    return scored_conversations(tok, chitchat_conversations(data_dir)[-300:-150], max_len)


def scored_conversations(
    tok: ChatTokenizer, convs: list[list[tuple[str, str]]], max_len: int = 512
) -> list[Seq]:
    """The first `convs`, cut to `max_len` tokens, until CHAT_TOKENS scored tokens."""
    out, n = [], 0
    for conv in convs:
        ids, mask = tok.conversation(conv)
        ids, mask = ids[:max_len], mask[:max_len]
        out.append((ids, mask))
        n += sum(mask[1:])
        if n >= CHAT_TOKENS:
            break
    return out


def heldout_assistant(
    teacher: K3ForCausalLM, tok: ChatTokenizer, path: Path = ASSISTANT_FILE
) -> list[list[str]]:
    """[[prompt, teacher reply]]: read from `path`, or generated once (default sampling, seed 11)."""
    if path.exists():
        return json.loads(path.read_text())
    cands = [t.format(t=topic) for topic in HELDOUT_TOPICS for t in HELDOUT_TEMPLATES]
    prompts = equal_length_prompts(cands, tok, HELDOUT_ASSISTANT_N, batch=16)
    outs = generate(
        teacher, [tok.prompt(p) for p in prompts], 160, SamplingParams(), tok.eos, seed=11
    )
    pairs = [[p, tok.decode(o)] for p, o in zip(prompts, outs, strict=True)]
    path.write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n")
    return pairs


def assistant_sequences(tok: ChatTokenizer, pairs: list[list[str]]) -> list[Seq]:
    return [
        tok.conversation([("user", p), ("assistant", r)], assistant_only=True) for p, r in pairs
    ]


@torch.no_grad()
def kl_metrics(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    seqs: list[Seq],
    teacher_logits: Sequence[torch.Tensor] | None = None,
    batch: int = 1,
) -> dict:
    """Mean KL(teacher‖student) per scored token and top-1 agreement (with its 95% bootstrap
    interval over sequences).

    `teacher_logits` (one entry per sequence: a list, or `metrics.HeadLogits`) skips the
    teacher forward when already known.
    `batch` > 1 runs that many sequences per forward, right-padded (causal: the padding never
    reaches a scored position), in order of length. One at a time (the default) is what the
    gate has always measured; on a GPU, one at a time is launch-bound (session 34: 78 s per
    `timed` evaluation on an H200).
    """
    dev = student.model.embed_tokens.weight.device
    per_seq: list[tuple[float, float, int]] = [(0.0, 0.0, 0)] * len(seqs)
    order = (
        sorted(range(len(seqs)), key=lambda j: len(seqs[j][0])) if batch > 1 else range(len(seqs))
    )
    groups = [list(order[k : k + batch]) for k in range(0, len(seqs), batch)]
    for group in groups:
        width = max(len(seqs[j][0]) for j in group)
        x = torch.zeros(len(group), width, dtype=torch.long, device=dev)
        for r, j in enumerate(group):
            x[r, : len(seqs[j][0])] = torch.tensor(seqs[j][0], device=dev)
        s_all = student(x).logits
        t_all = teacher(x).logits if teacher_logits is None else None
        for r, j in enumerate(group):
            ids, mask = seqs[j]
            t = teacher_logits[j] if t_all is None else t_all[r : r + 1, : len(ids)]
            m = torch.tensor([mask[1:]], device=dev)
            per_seq[j] = kl_top1(t[:, :-1], s_all[r : r + 1, : len(ids) - 1], m)
    kl, agree, n = (list(v) for v in zip(*per_seq, strict=True)) if seqs else ([], [], [])
    total = max(sum(n), 1)
    return {
        "kl": round(sum(kl) / total, 4),
        "top1": round(sum(agree) / total, 4),
        "tokens": int(sum(n)),
        "top1_ci95": [round(v, 4) for v in bootstrap_ci(agree, n)],
    }


def is_correct(answer: str, accepted: tuple[str, ...]) -> bool:
    text = answer.lower()
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", text) for a in accepted)


def factual_score(
    model: K3ForCausalLM,
    tok: ChatTokenizer,
    questions: list[tuple[str, tuple[str, ...]]] = FACTUAL,
) -> tuple[int, list[dict]]:
    """Greedy answers to `questions` (the gate's FACTUAL by default); returns (number correct,
    per-prompt detail)."""
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    outs = generate(model, [tok.prompt(q) for q, _ in questions], 40, greedy, tok.eos)
    detail = []
    for (q, acc), o in zip(questions, outs, strict=True):
        text = tok.decode(o)
        detail.append({"prompt": q, "answer": text, "correct": is_correct(text, acc)})
    return sum(d["correct"] for d in detail), detail


def max_phrase_repeats(text: str, n: int = 4) -> int:
    """Occurrences of the most frequent word n-gram (any longer repeated phrase contains one)."""
    words = re.findall(r"\w+", text.lower())
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return max(grams.values(), default=0)


def loop_check(model: K3ForCausalLM, tok: ChatTokenizer, seed: int = 3) -> tuple[int, list[dict]]:
    """Generate at the default sampling settings; worst phrase-repeat count over LOOP_PROMPTS."""
    outs = generate(
        model,
        [tok.prompt(p) for p in LOOP_PROMPTS],
        LOOP_TOKENS,
        SamplingParams(),
        tok.eos,
        seed=seed,
    )
    detail = [
        {
            "prompt": p,
            "text": tok.decode(o),
            "tokens": len(o),
            "max_repeats": max_phrase_repeats(tok.decode(o)),
        }
        for p, o in zip(LOOP_PROMPTS, outs, strict=True)
    ]
    return max(d["max_repeats"] for d in detail), detail


def evaluate(
    teacher: K3ForCausalLM,
    student: K3ForCausalLM,
    tok: ChatTokenizer,
    chat: list[Seq],
    assistant: list[Seq],
    fast: bool = False,
) -> dict:
    """All gate checks; `passed` is True only if every threshold holds."""
    t0 = time.time()
    rep: dict = {
        "chat": kl_metrics(teacher, student, chat),
        "assistant": kl_metrics(teacher, student, assistant),
    }
    ok = all(rep[k]["kl"] <= MAX_KL and rep[k]["top1"] >= MIN_TOP1 for k in ("chat", "assistant"))
    if not fast:
        rep["factual_correct"], rep["factual"] = factual_score(student, tok)
        rep["max_phrase_repeats"], rep["loops"] = loop_check(student, tok)
        ok = (
            ok
            and rep["factual_correct"] >= MIN_FACTUAL
            and rep["max_phrase_repeats"] <= MAX_REPEATS
        )
    rep["thresholds"] = {
        "max_kl": MAX_KL,
        "min_top1": MIN_TOP1,
        "min_factual": f"{MIN_FACTUAL}/{len(FACTUAL)}",
        "max_phrase_repeats": MAX_REPEATS,
    }
    rep["passed"] = bool(ok) and not fast
    rep["seconds"] = round(time.time() - t0)
    return rep


def export_delta(run: Path, out_dir: Path | None = None) -> tuple[Path, dict]:
    """Write the run's current best KDA layers (stage 2, else stage 1b), and the routed experts
    it trained, as a delta file, in `RUN/delta/` (what `ship` takes after the gate) unless
    `out_dir` is given."""
    from ..delta import write_delta
    from ..errors import CheckpointError
    from . import ckpt
    from .experts import official_expert_tensors
    from .hybrid import OFFICIAL_PREFIX, official_kda_tensors

    state = run / "state.json"
    st = json.loads(state.read_text()) if state.exists() else {}
    src = ckpt.latest_layers_file(run)
    saved = ckpt.load(run / src)
    if "chosen" not in st or saved is None:
        raise CheckpointError(
            f"{run}: no trained KDA layers to export yet",
            hint="`distill run` it until stage 1b has finished",
        )
    chosen = st["chosen"]
    tensors = official_kda_tensors({i: _Holder(saved["layers"][i]) for i in chosen})
    tensors |= official_expert_tensors(saved.get("experts") or {})
    n_bytes_bf16 = sum(t.numel() * 2 for t in tensors.values())
    dtype = "bf16" if n_bytes_bf16 <= 58e6 else "int8"
    tokens = {k: st.get(k, 0) for k in ("stage1_tokens", "stage1b_tokens", "stage2_tokens")}
    if src == "stage2.pt":
        tokens["stage2_tokens"] = saved["state"]["tokens"]
    out = (out_dir or run / "delta") / f"k3-smol-kda{len(chosen)}.safetensors"
    manifest = write_delta(
        tensors,
        out,
        kda_layers=chosen,
        dtype=dtype,
        extra={"tokens": tokens, "source": src, "experts": sorted(saved.get("experts") or {})},
        replace_prefixes=[f"{OFFICIAL_PREFIX}model.layers.{i}.self_attn." for i in chosen],
    )
    return out, manifest


class _Holder:
    """Adapts a saved state dict to the `state_dict()` interface `official_kda_tensors` reads."""

    def __init__(self, sd: dict) -> None:
        self.sd = sd

    def state_dict(self) -> dict:
        return self.sd


@contextmanager
def delta_student(
    run: Path, teacher_dir: Path, keep_delta: bool = True
) -> Iterator[tuple[K3ForCausalLM, Path, dict]]:
    """(student, delta path, manifest): the run's exported delta applied to a temp copy of the
    teacher and loaded in bf16 by the engine, i.e. exactly what would ship. The delta is kept in
    `RUN/delta/` only with `keep_delta` (the gate's, for `ship`)."""
    from ..delta import apply_delta
    from ..loading import load_model

    tmp = Path(tempfile.mkdtemp(prefix="k3gate-"))
    try:
        delta_path, manifest = export_delta(run, None if keep_delta else tmp)
        work = tmp / "k3-smol"
        shutil.copytree(teacher_dir, work)
        apply_delta(work, delta_path, manifest["sha256"])
        yield load_model(work, dtype=torch.bfloat16), delta_path, manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def gate_run(run: Path, fast: bool = False, threads: int | None = None) -> dict:
    """Export the run's delta, apply it to a temp copy of the teacher, gate the result.

    Writes `RUN/gate.json` (and the delta manifest next to the delta) and returns the report.
    """
    from ..loading import load_model
    from .pipeline import load_run

    cfg, _ = load_run(run)
    torch.set_num_threads(threads or cfg.threads)
    teacher_dir = Path(cfg.teacher)
    tok = ChatTokenizer(teacher_dir)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)
    with delta_student(run, teacher_dir) as (student, delta_path, manifest):
        chat = chat_sequences(tok, Path(cfg.data_dir))
        assistant = assistant_sequences(tok, heldout_assistant(teacher, tok))
        report = evaluate(teacher, student, tok, chat, assistant, fast=fast)
    report["kda_layers"] = manifest["kda_layers"]
    report["delta"] = manifest
    (run / "gate.json").write_text(json.dumps(report, indent=1) + "\n")
    (delta_path.with_suffix(".json")).write_text(
        json.dumps({**manifest, "gate": _summary(report)}, indent=1) + "\n"
    )
    return report


def _summary(rep: dict) -> dict:
    keys = ("chat", "assistant", "factual_correct", "max_phrase_repeats", "passed")
    return {k: rep[k] for k in keys if k in rep}
