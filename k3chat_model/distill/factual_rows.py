"""Stage-2 rows of one-line questions with the teacher's greedy answers, scored on the answer.

Why: the gate's factual check is greedy decoding of one-line questions, and it is the check
every grown hybrid fails. The other training rows are long replies and chat, where an answer's
first tokens (which carry the fact) are a few in hundreds. These rows hold only Q→A pairs, the
teacher's *greedy* answer (the path the check follows), with the loss on the answer alone.
The questions are `quiz_train.factual_train_prompts()`: held out by subject from the gate and
from every held-out factual set, so those checks stay unbiased judges of it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import torch

from ..events import SamplingParams
from . import ckpt
from .data import ChatTokenizer, pack
from .generate import fp32_on_slow_cpu, generate
from .quiz_train import factual_train_prompts

ANSWER_MAX_NEW = 48
"""A little past the gate's 40 tokens: the fact comes first, the rest is the answer's form."""
FACTUAL_FILE = "factual_replies.json"


def training_questions(n: int) -> list[str]:
    """`n` of the training questions (all if fewer), a fixed sample across their topics."""
    qs = factual_train_prompts()
    random.Random(0).shuffle(qs)
    return qs[:n]


def factual_replies(
    run: Path,
    teacher,  # noqa: ANN001
    tok: ChatTokenizer,
    n: int,
    batch: int,
    log: Callable[[str], None] = print,
) -> list[list]:
    """[[question, greedy answer, finished]] for `training_questions(n)`, kept in
    `RUN/data/factual_replies.json` so a rerun does not generate them again."""
    path = run / "data" / FACTUAL_FILE
    questions = training_questions(n)
    saved = ckpt.read_json(path) or []
    if [q for q, _, _ in saved] == questions:
        return saved
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0)
    with fp32_on_slow_cpu(teacher):  # the answers only place the rows; the teacher scores them
        outs = generate(teacher, [tok.prompt(q) for q in questions], ANSWER_MAX_NEW + 1, greedy,
                        tok.eos, batch=batch)  # fmt: skip
    triples = [
        [q, tok.decode(o[:ANSWER_MAX_NEW]), len(o) <= ANSWER_MAX_NEW]
        for q, o in zip(questions, outs, strict=True)
    ]
    ckpt.write_json(path, triples)
    log(f"factual replies: {len(triples)} ({sum(len(o) for o in outs)} tokens)")
    return triples


def answer_sequence(tok: ChatTokenizer, question: str, answer: str, finished: bool):  # noqa: ANN201
    """(ids, mask) of system + question + answer, the mask on the answer only. A cut answer
    gets no end-of-turn in the mask: the teacher did not end it there."""
    ids = tok.prompt(question)
    body = tok.encode(answer)
    end = tok.encode("<|im_end|>\n")
    mask = [0] * len(ids) + [1] * len(body) + [int(finished)] * len(end)
    return ids + body + end, mask


def factual_rows(
    tok: ChatTokenizer, triples: list[list], seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The answers packed into rows of `seq_len` tokens, as `data.pack` packs replies."""
    return pack([answer_sequence(tok, q, a, bool(f)) for q, a, f in triples], seq_len)
