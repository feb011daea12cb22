"""The resumable distillation run: data → stage 1 (all candidates) → rank → stage 1 (chosen) →
stage 2 → gate → delta. Each phase records completion in `RUN/state.json`; a killed run
restarts at the first unfinished phase and that phase resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError
from ..events import SamplingParams
from ..loading import load_model
from ..model import K3ForCausalLM
from . import ckpt
from .data import (
    EXTRA_TOPICS,
    FURTHER_TOPICS,
    MORE_TOPICS,
    SEED,
    ChatTokenizer,
    chatterbot_questions,
    chitchat_conversations,
    equal_length_prompts,
    instruction_prompts,
    interleave,
    pack,
)
from .experts import load_experts, trainable
from .gate import delta_student
from .generate import fp32_on_slow_cpu, generate
from .hybrid import attention_output_rms, init_kda_from_gqa, kda_config, swap_in
from .metrics import hybrid_kl, single_swap_kl, teacher_logits
from .quiz import quiz_prompts
from .stage1 import Stage1Config, train_stage1
from .stage2 import Stage2Config, train_stage2

SEQ = 512


@dataclass
class RunConfig:
    teacher: str
    data_dir: str
    candidates: list[int] = field(default_factory=lambda: list(range(3, 30)))
    n_layers: int = 8
    keep_layers: list[int] = field(default_factory=list)
    """KDA layers of an earlier milestone that must stay KDA (grown, not re-chosen)."""
    init_from: str | None = None
    """An earlier run whose trained KDA layers (stage 2 > 1b > 1) start this one's."""
    stage1_from: str | None = None
    """A run whose stage-1 checkpoint (e.g. a many-candidate stage 1) starts this run's stage 1
    for the layers `init_from` lacks: a longer stage 1 continues it instead of starting over."""
    gen_prompts: int = 192
    gen_max_new: int = 160
    gen_batch: int = 48
    student_prompts: int = 0
    """Prompts answered by the current hybrid itself (greedy) and added to the training rows;
    generated once stage 1b or stage 2 has a checkpoint (a larger value reopens the data)."""
    student_max_new: int = 96
    stage1_tokens: int = 150_000
    stage1b_tokens: int = 100_000
    stage2_tokens: int = 100_000
    stage1_lr: float = 1e-3
    stage2_lr: float = 3e-4
    stage2_top1_weight: float = 0.0
    """Weight of the teacher-argmax cross-entropy added to stage 2's KL (see stage2.py)."""
    stage2_pretrained_lr_scale: float = 1.0
    """Stage 2's learning rate for kept layers that `init_from` trained through stage 2, as a
    fraction of `stage2_lr`: they are adapted already, the new layers start from stage 1."""
    stage1_in_context: bool = False
    """Stage 1 and 1b of a growing run capture the teacher's attention with the `init_from`
    layers swapped in, so new layers learn the stream of the hybrid they join (session 20)."""
    threads: int = 1
    ckpt_seconds: float = 240.0


def _log(run: Path, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    with open(run / "events.log", "a") as f:
        f.write(line + "\n")


def load_run(run: Path) -> tuple[RunConfig, dict]:
    try:
        cfg = RunConfig(**json.loads((run / "config.json").read_text()))
    except FileNotFoundError as e:
        raise ConfigError(
            f"{run}: not a distillation run (no config.json)", hint="start one with `distill run`"
        ) from e
    st = (
        json.loads((run / "state.json").read_text())
        if (run / "state.json").exists()
        else {"done": []}
    )
    return cfg, st


def run_teacher(run: Path) -> tuple[Path, ChatTokenizer, K3ForCausalLM]:
    """The run's teacher directory, its tokenizer and the teacher in bf16 (as the gate runs it):
    where every evaluation of a run's hybrids starts."""
    teacher_dir = Path(load_run(run)[0].teacher)
    return teacher_dir, ChatTokenizer(teacher_dir), load_model(teacher_dir, dtype=torch.bfloat16)


VALIDATION_FILE = "val_assistant.json"


def validation_prompts(run: Path) -> set[str]:
    """Prompts reserved for `distill timed`'s selection set (`validation.py`): never trained on."""
    path = run / "data" / VALIDATION_FILE
    return {p for p, _ in json.loads(path.read_text())} if path.exists() else set()


def init_run(run: Path, cfg: RunConfig) -> None:
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "config.json").exists():
        ckpt.write_json(run / "config.json", asdict(cfg))


QUIZ_SHARE = 0.25
"""Share of a reply pool's new prompts that are one-line factual questions (more only when the
other pools run out). Until session 26 the quiz pool came first, so a 192-reply run was all
one-line answers and its stage 2 never saw the paragraph replies the gate's assistant check
scores (docs/k3-smol-sessions.md, sessions 25-26)."""


def reply_prompts(cfg: RunConfig, tok: ChatTokenizer, seen: set[str], want: int) -> list[str]:
    """Up to `want` unused prompts: a `QUIZ_SHARE` of short factual questions (the one-line
    Q->A form the chat corpora lack), the rest chatterbot questions and templated instructions,
    then instructions on more topics, then on two further lists (held-out assistant KL and top-1 lag
    the training replies': more varied replies); more quiz questions if those run out. Sorted by
    prompt length, so each generation batch holds few lengths."""
    pools = (
        chatterbot_questions(Path(cfg.data_dir)) + instruction_prompts(),
        instruction_prompts(MORE_TOPICS),
        instruction_prompts(EXTRA_TOPICS),
        instruction_prompts(FURTHER_TOPICS),
        quiz_prompts(),
    )
    quiz_want = round(want * QUIZ_SHARE)
    quiz = equal_length_prompts([p for p in pools[-1] if p not in seen], tok, quiz_want,
                                batch=cfg.gen_batch)  # fmt: skip
    prompts: list[str] = []
    seen = seen | set(quiz)
    for pool in pools:
        fresh = [p for p in pool if p not in seen]
        picked = equal_length_prompts(fresh, tok, want - len(quiz) - len(prompts),
                                      batch=cfg.gen_batch)  # fmt: skip
        prompts += picked
        seen = seen | set(picked)
    return sorted(quiz + prompts, key=lambda p: len(tok.prompt(p)))


def _replies(
    run: Path,
    name: str,
    target: int,
    model,  # noqa: ANN001
    cfg: RunConfig,
    tok: ChatTokenizer,
    params: SamplingParams,
    max_new: int,
    stop: ckpt.StopFlag | None,
) -> list[list[str]] | None:
    """[prompt, reply] pairs from `model` in `RUN/data/{name}.json`, generated one batch at a
    time and saved after each, so a killed run keeps them and a larger `target` adds new prompts
    only. Returns None if stopped before `target` replies exist."""
    gen_file = run / "data" / f"{name}.json"
    replies = json.loads(gen_file.read_text()) if gen_file.exists() else []
    want = target - len(replies)
    if want <= 0:
        return replies
    prompts = reply_prompts(cfg, tok, {p for p, _ in replies} | validation_prompts(run), want)
    t0, made = time.time(), 0
    for start in range(0, len(prompts), cfg.gen_batch):
        if stop and stop.stop:
            return None
        chunk = prompts[start : start + cfg.gen_batch]
        outs = generate(
            model,
            [tok.prompt(p) for p in chunk],
            max_new,
            params,
            tok.eos,
            seed=7 + len(replies),
            batch=cfg.gen_batch,
        )
        replies += [[p, tok.decode(o)] for p, o in zip(chunk, outs, strict=True)]
        ckpt.write_json(gen_file, replies)
        made += sum(len(o) for o in outs)
        _log(
            run,
            f"{name.replace('_', ' ')}: {len(replies)}/{target} prompts, {made} new tokens, "
            f"{made / (time.time() - t0):.0f} tok/s",
        )
    return replies


def teacher_replies(
    run: Path, cfg: RunConfig, teacher, tok: ChatTokenizer, stop: ckpt.StopFlag | None = None
) -> list[list[str]] | None:  # noqa: ANN001
    """The teacher's replies at the app's default sampling: what users see it say."""
    with fp32_on_slow_cpu(teacher):
        return _replies(
            run, "teacher_replies", cfg.gen_prompts, teacher, cfg, tok, SamplingParams(),
            cfg.gen_max_new, stop,
        )  # fmt: skip


def student_replies(
    run: Path, cfg: RunConfig, student, tok: ChatTokenizer, stop: ckpt.StopFlag | None = None
) -> list[list[str]] | None:  # noqa: ANN001
    """The hybrid's own greedy replies, as it would ship (on-policy distillation). Scored by
    the teacher, they train the student on the states its own decoding reaches, where a drift
    ("La Cité, la Cité, …") starts and the teacher's replies never go."""
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    return _replies(
        run, "student_replies", cfg.student_prompts, student, cfg, tok, greedy,
        cfg.student_max_new, stop,
    )  # fmt: skip


def build_data(run: Path, cfg: RunConfig, replies: list[list[str]], tok: ChatTokenizer) -> None:
    """Training rows: chitchat (minus held-out) interleaved with replies to prompts (the
    teacher's, then the student's own)."""
    convs = chitchat_conversations(Path(cfg.data_dir))
    train = [tok.conversation(c) for c in convs[:-300]]
    rank = [tok.conversation(c) for c in convs[-150:]]
    rows, mask = pack(train, SEQ)
    rrows, rmask = pack(rank, SEQ)
    assist = [tok.conversation([("user", p), ("assistant", r)]) for p, r in replies]
    random.Random(SEED).shuffle(assist)  # later batches (e.g. quiz replies) spread through rows
    arows, amask = pack(assist, SEQ)
    torch.save(
        {"chat": (rows, mask), "assist": (arows, amask), "rank": (rrows[:2], rmask[:2])},
        run / "data" / "rows.pt",
    )
    _log(run, f"data: {rows.numel()} chat tokens, {arows.numel()} teacher-reply tokens")


def run_pipeline(run: Path, stop: ckpt.StopFlag | None = None, until: str | None = None) -> dict:
    """Run (or resume) every unfinished phase; returns the run state."""
    cfg, st = load_run(run)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)

    def finish(phase: str, **extra: object) -> None:
        st["done"].append(phase)
        st.update(extra)
        ckpt.write_json(run / "state.json", st)
        _log(run, f"phase {phase} done")

    teacher_dir = Path(cfg.teacher)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)
    tok = ChatTokenizer(teacher_dir)
    n_replies, n_own = st.get("teacher_replies"), st.get("student_replies", 0)
    trained = any((run / f).exists() for f in ("stage2.pt", "stage1b.pt"))
    own_due = "chosen" in st and trained and cfg.student_prompts > n_own
    if "data" in st["done"] and n_replies is not None and (cfg.gen_prompts > n_replies or own_due):
        st["done"].remove("data")  # a larger prompt budget generates the missing replies
        _log(run, f"data reopened: {n_replies}/{n_own} -> {cfg.gen_prompts}/"
             f"{cfg.student_prompts if own_due else n_own} teacher/student replies")  # fmt: skip
    if "data" not in st["done"]:
        (run / "data").mkdir(exist_ok=True)
        replies = teacher_replies(run, cfg, teacher, tok, stop)
        if replies is None:
            return st
        own_file = run / "data" / "student_replies.json"
        own = json.loads(own_file.read_text()) if own_file.exists() else []
        if own_due:
            with delta_student(run, teacher_dir, keep_delta=False) as (hybrid, _, _):
                own = student_replies(run, cfg, hybrid, tok, stop)
            if own is None:
                return st
        build_data(run, cfg, replies + own, tok)
        finish("data", teacher_replies=len(replies), student_replies=len(own))
    d = torch.load(run / "data" / "rows.pt")
    (crow, _), (arow, _), (rrow, rmask) = d["chat"], d["assist"], d["rank"]
    mixed = interleave(crow, arow, every=2)
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))

    def fresh(layers: list[int]) -> dict:
        rms = attention_output_rms(teacher, layers, crow[:2].long())
        mods = {
            i: init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i, rms[i]) for i in layers
        }
        missing = set(mods)
        if cfg.init_from:
            missing -= _load_earlier(Path(cfg.init_from), mods)
        if cfg.stage1_from and missing and "stage1" not in st["done"]:  # later: stage1.pt
            saved, tokens = read_stage1(Path(cfg.stage1_from))
            warm = sorted(missing & set(saved["layers"]))
            for i in warm:
                fit_layer(mods[i], saved["layers"][i], f"{cfg.stage1_from}: layer {i}")
            if warm:
                _log(run, f"stage 1 starts layers {warm} from {cfg.stage1_from} "
                     f"({tokens} stage-1 tokens)")  # fmt: skip
        return mods

    if until == "data":
        return st
    # read init_from's checkpoint only while a phase that needs it is pending
    pretrained = set(st["pretrained"]) if "pretrained" in st else _trained_by_init_from(cfg)
    todo = [i for i in cfg.candidates if i not in pretrained]
    if "stage1" not in st["done"] and not todo:
        finish("stage1", stage1_tokens=0)  # every layer of the hybrid is already trained
    if "stage1" not in st["done"]:
        students = fresh(todo)
        s = train_stage1(
            teacher,
            students,
            mixed,
            Stage1Config(cfg.stage1_tokens, lr=cfg.stage1_lr, ckpt_seconds=cfg.ckpt_seconds),
            run / "stage1.pt",
            run / "train_log.jsonl",
            stop,
            context=fresh(sorted(pretrained)) if cfg.stage1_in_context else None,
        )
        if not s["done"]:
            return st
        finish("stage1", stage1_tokens=s["tokens"])
    if until == "stage1":  # e.g. to price the candidates with `attribute --add-from` first
        return st
    if "rank" not in st["done"]:
        students = fresh(todo)
        saved = ckpt.load(run / "stage1.pt")
        for i in students:
            students[i].load_state_dict(saved["layers"][i])
        # a growing run ranks each candidate added to the hybrid it would join
        context = fresh(sorted(pretrained)) if pretrained else {}
        ref = teacher_logits(teacher, rrow)
        kl = single_swap_kl(teacher, students, rrow, rmask, context, ref) if students else {}
        order = sorted(kl, key=kl.get)
        chosen = list(cfg.keep_layers) + [i for i in order if i not in cfg.keep_layers]
        chosen = sorted(chosen[: cfg.n_layers])
        ranking = {"single_swap_kl": {str(i): kl[i] for i in order}, "chosen": chosen}
        if context:
            ranking["context"] = {
                "layers": sorted(context),
                "kl": hybrid_kl(teacher, context, rrow, rmask, ref),
            }
        ckpt.write_json(run / "ranking.json", ranking)
        _log(run, "ranking: " + ", ".join(f"{i}:{kl[i]:.4f}" for i in order))
        finish("rank", chosen=chosen)
    chosen = st["chosen"]
    if "stage1b" not in st["done"]:
        new = [i for i in chosen if i not in pretrained]
        students = fresh(new)
        saved = ckpt.load(run / "stage1.pt")
        for i in new:
            students[i].load_state_dict(saved["layers"][i])
        earlier = fresh([i for i in chosen if i in pretrained])  # stage-2 weights of init_from
        tokens = 0
        if cfg.stage1b_tokens > 0 and new:
            s = train_stage1(
                teacher,
                students,
                mixed,
                Stage1Config(
                    cfg.stage1b_tokens,
                    lr=cfg.stage1_lr / 2,
                    warmup_steps=5,
                    ckpt_seconds=cfg.ckpt_seconds,
                ),
                run / "stage1b.pt",
                run / "train_log.jsonl",
                stop,
                name="stage1b",
                context=earlier if cfg.stage1_in_context else None,
            )
            if not s["done"]:
                return st
            tokens = s["tokens"]
        students |= earlier
        out = {
            "layers": {i: students[i].state_dict() for i in chosen},
            "opt": None,
            "state": {"done": True},
        }
        if pretrained and (prev := ckpt.load(Path(cfg.init_from) / "stage2.pt")):
            if prev.get("experts"):  # routed experts trained with the kept layers go on with them
                out["experts"] = prev["experts"]
        ckpt.save_atomic(out, run / "stage1b.pt")
        finish("stage1b", stage1b_tokens=tokens, pretrained=sorted(set(chosen) & pretrained))
    if until == "stage1b":
        return st
    if "stage2" in st["done"] and cfg.stage2_tokens > st.get("stage2_tokens", 0):
        st["done"].remove("stage2")  # a larger budget continues stage 2 from its checkpoint
        st["stage2_reopened_at"] = st["stage2_tokens"]
        _log(run, f"stage 2 reopened: {st['stage2_tokens']} -> {cfg.stage2_tokens} tokens")
    if "stage2" not in st["done"]:
        students, student = load_hybrid(run, teacher_dir, chosen, "stage1b.pt")
        experts = trainable(student, ckpt.load(run / "stage2.pt") or ckpt.load(run / "stage1b.pt"))
        s = train_stage2(
            teacher,
            student,
            students,
            *stage2_rows(run),
            Stage2Config(
                cfg.stage2_tokens,
                lr=cfg.stage2_lr,
                top1_weight=cfg.stage2_top1_weight,
                ckpt_seconds=cfg.ckpt_seconds,
                rewarm_tokens=st.get("stage2_reopened_at", 0),
                lr_scale=pretrained_lr_scale(cfg, st),
                # experts come with the kept layers of --init-from (or a rewound timed run)
                expert_lr_scale=cfg.stage2_pretrained_lr_scale if cfg.init_from else 1.0,
                compile_loss=True,  # full CPU chunks only; a no-op elsewhere
            ),
            run / "stage2.pt",
            run / "train_log.jsonl",
            stop,
            experts=experts,
        )
        if not s["done"]:
            return st
        finish("stage2", stage2_tokens=s["tokens"])
    return st


def stage2_rows(
    run: Path,
    all_chat: bool = False,
    extra: list[tuple[list[int], list[int]]] | None = None,
    order_seed: int | None = None,
    replies_per_chat: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2's (rows, mask): each reply row followed by a chat row (chat rows cycle, so only
    the first len(replies) are used). With `all_chat`, each chat row is followed by
    `replies_per_chat` reply rows instead (replies cycle): for budgets of many passes, more
    varied chat text, and a reply share the caller chooses. `extra` reply conversations
    (ids, mask) are packed to the same row length and join the run's replies.

    `order_seed` shuffles the chat rows and the reply rows (each among themselves; the
    alternation stays). Why: training walks the rows in order, so a budget shorter than one
    pass would otherwise see the same first rows on every run and never reach the `extra`
    rows appended at the end."""
    d = torch.load(run / "data" / "rows.pt")
    (crow, cmask), (arow, amask) = d["chat"], d["assist"]
    if extra:
        erow, emask = pack(extra, arow.shape[1])
        arow, amask = torch.cat([arow, erow.to(arow.dtype)]), torch.cat([amask, emask])
    if order_seed is not None:
        g = torch.Generator().manual_seed(order_seed)
        c, a = torch.randperm(len(crow), generator=g), torch.randperm(len(arow), generator=g)
        crow, cmask, arow, amask = crow[c], cmask[c], arow[a], amask[a]
    if all_chat:
        k = replies_per_chat
        return interleave(crow, arow, 1, take=k), interleave(cmask, amask, 1, take=k)
    if replies_per_chat != 1:
        raise ValueError("replies_per_chat needs all_chat (reply rows lead otherwise)")
    return interleave(arow, crow, every=1), interleave(amask, cmask, every=1)


def pretrained_lr_scale(
    cfg: RunConfig, st: dict, scale: float | None = None, train: list[int] | None = None
) -> dict[int, float]:
    """Stage 2's per-layer LR multipliers: `scale` (default the run's) for the layers that
    entered stage 2 already trained by `init_from` (recorded in the state at stage 1b).

    With `train`, only those of them learn and the rest are frozen (scale 0): e.g. the seeded
    layers above a new one, which the backward passes through anyway, adapt to it while the
    ones below keep their weights and stay out of the backward.
    """
    value = cfg.stage2_pretrained_lr_scale if scale is None else scale
    pretrained = st.get("pretrained", [])
    if train is not None:
        if stray := sorted(set(train) - set(pretrained)):
            raise ConfigError(
                f"layers {stray} were not taken trained from --init-from",
                hint=f"this run's pretrained layers are {sorted(pretrained)}",
            )
        return {i: value if i in train else 0.0 for i in pretrained}
    return dict.fromkeys(pretrained, value)


def _trained_by_init_from(cfg: RunConfig) -> set[int]:
    """Kept layers that `init_from` trained to its last phase: through stage 2 (e.g. a seeded
    shipped hybrid), or, for a run stopped after stage 1b (`--until stage1b`), through 1b.
    They skip stage 1 and 1b here, whose attention-matching objective would undo stage 2, and
    which a 1b-finished layer has had already."""
    if not cfg.init_from:
        return set()
    prev = Path(cfg.init_from)
    saved = ckpt.load(prev / "stage2.pt")
    if saved is None and (saved := ckpt.load(prev / "stage1b.pt")) is not None:
        saved = saved if saved["state"].get("done") else None  # 1b still training: not yet
    return set(cfg.keep_layers) & set(saved["layers"]) if saved else set()


def _load_earlier(prev: Path, mods: dict) -> set[int]:
    """Start `mods` from an earlier run's most-trained copy of each layer, where it has one;
    returns the layers it had."""
    todo = set(mods)
    for name in ("stage2.pt", "stage1b.pt", "stage1.pt"):
        saved = ckpt.load(prev / name) if todo else None
        for i in sorted(todo & set(saved["layers"]) if saved else ()):
            fit_layer(mods[i], saved["layers"][i], f"{prev / name}: layer {i}")
            todo.discard(i)
    return set(mods) - todo


def read_stage1(run: Path) -> tuple[dict, int]:
    """(checkpoint, tokens trained) of `run/stage1.pt`, its latest state, finished or not."""
    try:
        saved = ckpt.load(run / "stage1.pt")
    except Exception as e:  # noqa: BLE001 - torch raises many types for a bad file
        raise CheckpointError(f"{run / 'stage1.pt'}: not a readable checkpoint ({e})") from e
    if saved is None:
        raise ConfigError(f"{run}: no stage1.pt to take trained layers from",
                          hint="run its stage 1 first (`distill run RUN --until stage1b`)")  # fmt: skip
    return saved, int(saved["state"]["tokens"])


def fit_layer(mod: torch.nn.Module, weights: dict, what: str) -> None:
    """Load a stored layer, or say which one is from another model."""
    try:
        mod.load_state_dict(weights)
    except RuntimeError as e:  # shapes of another model
        raise CheckpointError(f"{what} does not fit this teacher") from e


def load_hybrid(
    run: Path,
    teacher_dir: Path,
    chosen: list[int],
    ckpt_name: str,
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[dict, torch.nn.Module]:
    """A teacher copy with `chosen` layers replaced by the KDA layers stored in `ckpt_name`
    (stage2.pt falls back to stage1b.pt when stage 2 has not checkpointed yet), and with the
    routed experts that checkpoint trained (`experts.py`), in fp32."""
    student = load_model(teacher_dir, dtype=dtype)
    kcfg = kda_config(student.config, list(range(student.config.num_hidden_layers)))
    saved = ckpt.load(run / ckpt_name)
    if saved is None and ckpt_name == "stage2.pt":
        saved = ckpt.load(run / "stage1b.pt")
    students = {}
    for i in chosen:
        mod = init_kda_from_gqa(student.model.layers[i].self_attn, kcfg, i)
        mod.load_state_dict(saved["layers"][i])
        students[i] = mod
    swap_in(student, students)
    load_experts(student, saved)
    return students, student
