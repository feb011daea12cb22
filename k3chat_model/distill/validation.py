"""Selection sets for `distill timed`: text held out from training *and* from the gate.

Why: `timed` keeps the best of several snapshots. Choosing it on the gate's own sets would bias
the gate upward by up to the spread of its estimates (about ±1 point of top-1 on 32 assistant
replies), which is the margin a milestone is decided by. So snapshots are chosen on these sets
and the gate's are only reported.

- chat: the chitchat conversations kept for layer ranking (`convs[-150:]`), disjoint from both
  the training rows (`convs[:-300]`) and the gate's (`convs[-300:-150]`);
- assistant: teacher replies to `VALIDATION_N` prompts of the run's pools that it has not
  trained on, saved once in `RUN/data/val_assistant.json`. Their prompts are then reserved:
  a later, larger `--gen-prompts` never picks them for training;
- topics: teacher replies in the gate's assistant form (its four templates, default sampling,
  160 new tokens) on `SELECTION_TOPICS`, which neither the gate nor any training pool names,
  saved once in `RUN/data/val_topics.json`. Why: a growing run's pool prompts were short
  factual questions first (before session 26), so its `assistant` set held 48 one-line answers
  while the gate's holds paragraphs on topics; the two ranked 12-layer hybrids a point apart
  (session 23);
- quiz: the teacher's greedy answers to `quiz.HELDOUT_QUIZ`, one-line questions in the form the
  gate's factual check asks (which no pool holds), saved once in `RUN/data/val_quiz.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from ..events import SamplingParams
from ..model import K3ForCausalLM
from . import ckpt
from .data import ChatTokenizer, chitchat_conversations
from .gate import Seq, assistant_sequences, scored_conversations
from .gate_data import HELDOUT_TEMPLATES
from .generate import generate
from .pipeline import VALIDATION_FILE, RunConfig, reply_prompts
from .quiz import HELDOUT_QUIZ

VALIDATION_N = 48
VALIDATION_SEED = 13
QUIZ_FILE = "val_quiz.json"
QUIZ_MAX_NEW = 32
TOPICS_FILE = "val_topics.json"
TOPICS_SEED = 17
TOPICS_MAX_NEW = 160  # as the gate's held-out assistant replies

# Selection-only topics (48 x the gate's 4 templates = 192 replies, 6x the gate's 32): no
# training topic list, training question, gate topic or gate factual question names one (a
# test checks it), so the set is held out from both, as the gate's own topics are.
SELECTION_TOPICS = [
    "sloths", "beavers", "hippos", "walruses", "puffins", "pelicans", "toucans", "lobsters",
    "tortoises", "fireflies", "seaweed", "orchids", "Greenland", "Siberia", "the Danube",
    "Mount Fuji", "Stonehenge", "the Parthenon", "Venice", "blacksmiths", "typewriters",
    "sundials", "binoculars", "abacuses", "fountain pens", "zippers", "velcro", "trams",
    "ferries", "ambulances", "weaving", "quilting", "juggling", "magic tricks", "skateboarding",
    "kayaking", "scuba diving", "fencing", "judo", "dominoes", "avocados", "almonds", "waffles",
    "porridge", "smoothies", "pickles", "igloos", "Halloween",
]  # fmt: skip


def validation_pairs(
    run: Path, cfg: RunConfig, teacher: K3ForCausalLM, tok: ChatTokenizer
) -> list[list[str]]:
    """[[prompt, teacher reply]] for the assistant selection set: read, or generated once."""
    path = run / "data" / VALIDATION_FILE
    if (saved := ckpt.read_json(path)) is not None:
        return saved
    source = run / "data" / "teacher_replies.json"
    trained = {p for p, _ in json.loads(source.read_text())} if source.exists() else set()
    prompts = reply_prompts(cfg, tok, trained, VALIDATION_N)
    if not prompts:
        raise ConfigError(
            f"{run}: every reply prompt is already trained on; none is left to validate with",
            hint="add topics to the prompt pools in distill/data.py",
        )
    outs = generate(teacher, [tok.prompt(p) for p in prompts], cfg.gen_max_new, SamplingParams(),
                    tok.eos, seed=VALIDATION_SEED, batch=cfg.gen_batch)  # fmt: skip
    pairs = [[p, tok.decode(o)] for p, o in zip(prompts, outs, strict=True)]
    ckpt.write_json(path, pairs)
    return pairs


def validation_sets(
    run: Path,
    cfg: RunConfig,
    teacher: K3ForCausalLM,
    tok: ChatTokenizer,
    names: tuple[str, ...] = ("chat", "assistant", "topics"),
) -> dict[str, list[Seq]]:
    """{"chat": …, "assistant": …, "topics": …} scored like the gate's sets, on the selection
    text. `names` builds only those: a set made for the first time costs teacher generation
    (topics: minutes on a CPU), so a caller that scores one set does not pay for the others."""
    build = {
        "chat": lambda: scored_conversations(
            tok, chitchat_conversations(Path(cfg.data_dir))[-150:]
        ),
        "assistant": lambda: assistant_sequences(tok, validation_pairs(run, cfg, teacher, tok)),
        "topics": lambda: topic_set(run, teacher, tok),
    }
    return {k: build[k]() for k in names}


def topic_pairs(run: Path, teacher: K3ForCausalLM, tok: ChatTokenizer) -> list[list[str]]:
    """[[prompt, teacher reply]] on `SELECTION_TOPICS` in the gate's form: read, or made once.

    Replies do not depend on batching (one seeded generator per prompt), so every run with the
    same teacher makes the same set, and hybrids of different runs compare on the same text."""
    path = run / "data" / TOPICS_FILE
    if (saved := ckpt.read_json(path)) is not None:
        return saved
    prompts = [t.format(t=topic) for topic in SELECTION_TOPICS for t in HELDOUT_TEMPLATES]
    outs = generate(teacher, [tok.prompt(p) for p in prompts], TOPICS_MAX_NEW, SamplingParams(),
                    tok.eos, seed=TOPICS_SEED, batch=48)  # fmt: skip
    pairs = [[p, tok.decode(o)] for p, o in zip(prompts, outs, strict=True)]
    ckpt.write_json(path, pairs)
    return pairs


def topic_set(run: Path, teacher: K3ForCausalLM, tok: ChatTokenizer) -> list[Seq]:
    """The topics selection set, scored on the reply tokens like the gate's assistant set."""
    return assistant_sequences(tok, topic_pairs(run, teacher, tok))


def quiz_pairs(run: Path, teacher: K3ForCausalLM, tok: ChatTokenizer) -> list[list[str]]:
    """[[question, teacher's greedy answer]] for `HELDOUT_QUIZ`: read, or generated once.

    Greedy, as the gate's factual check decodes, so the scored tokens are the answer the
    hybrid must reproduce; the first tokens carry the fact."""
    path = run / "data" / QUIZ_FILE
    if (saved := ckpt.read_json(path)) is not None:
        return saved
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    outs = generate(teacher, [tok.prompt(q) for q in HELDOUT_QUIZ], QUIZ_MAX_NEW, greedy, tok.eos)
    pairs = [[q, tok.decode(o)] for q, o in zip(HELDOUT_QUIZ, outs, strict=True)]
    ckpt.write_json(path, pairs)
    return pairs


def quiz_set(run: Path, teacher: K3ForCausalLM, tok: ChatTokenizer) -> list[Seq]:
    """The quiz selection set, scored on the answer tokens like the assistant sets."""
    return assistant_sequences(tok, quiz_pairs(run, teacher, tok))


def quiz_agreement(
    model: K3ForCausalLM, tok: ChatTokenizer, pairs: list[list[str]], n: int = 12
) -> float:
    """Share of quiz questions whose greedy `n`-token answer from `model` begins the teacher's.

    Why: teacher-forced top-1 weighs the answer's first token (where a hybrid turns "A spider
    has eight legs" into "The answer to this question is a classic paradox") as one in ~25;
    greedy decoding, like the gate's factual check, follows that token wherever it leads."""
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    outs = generate(model, [tok.prompt(q) for q, _ in pairs], n, greedy, tok.eos)
    agree = [a.startswith(tok.decode(o)) for (_, a), o in zip(pairs, outs, strict=True)]
    return sum(agree) / max(len(agree), 1)
