"""Training reply prompts never touch the gate's held-out assistant topics, so held-out
assistant KL measures generalisation, not recall of trained replies."""

from __future__ import annotations

import json
import re

from k3chat_model.distill.data import (
    EXTRA_TOPICS,
    FURTHER_TOPICS,
    MORE_TOPICS,
    TOPICS,
    instruction_prompts,
)
from k3chat_model.distill.gate import ASSISTANT_FILE
from k3chat_model.distill.gate_data import HELDOUT_TOPICS


def test_training_topics_never_name_a_heldout_topic() -> None:
    for topic in TOPICS + MORE_TOPICS + EXTRA_TOPICS + FURTHER_TOPICS:
        for held in HELDOUT_TOPICS:
            assert not re.search(rf"\b{re.escape(held.lower())}\b", topic.lower()), (topic, held)


def test_more_topics_only_add_new_prompts() -> None:
    assert len(set(MORE_TOPICS)) == len(MORE_TOPICS) >= 150
    first, more = set(instruction_prompts()), set(instruction_prompts(MORE_TOPICS))
    extra = set(instruction_prompts(EXTRA_TOPICS))
    n = len(EXTRA_TOPICS)
    assert len(set(EXTRA_TOPICS)) == n >= 400 and len(extra) == 8 * n
    further = set(instruction_prompts(FURTHER_TOPICS))
    m = len(FURTHER_TOPICS)
    assert len(set(FURTHER_TOPICS)) == m >= 500 and len(further) == 8 * m
    assert not first & more and not (first | more) & extra and not (first | more | extra) & further
    held = {p for p, _ in json.loads(ASSISTANT_FILE.read_text())}
    assert len(held) == 32 and not held & (first | more | extra | further)
