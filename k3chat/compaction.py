"""Compaction: summarise older turns so a session can go on past the context window.

The log keeps every original event; a `compaction` event records the summary and how many
trailing messages stay verbatim, so resume rebuilds the same shortened context
(see `k3chat.conversation.Transcript.apply`).
"""

from __future__ import annotations

import io
import threading
from dataclasses import replace
from typing import Any

from k3chat.documents import Summarizer, summary_budget
from k3chat_model.events import Message, SamplingParams

__all__ = ["split_point", "summarize", "summary_budget", "render_transcript"]


def split_point(history: list[Message], keep_turns: int) -> int:
    """Index of the first message kept: the start of the `keep_turns`-th last user turn.

    Cutting only at a user message never separates a tool call from its result. Returns 0
    when there is nothing older than the kept turns.
    """
    users = [i for i, m in enumerate(history) if m.role == "user"]
    if keep_turns <= 0:
        return len(history)
    if len(users) <= keep_turns:
        return 0
    return users[-keep_turns]


def render_transcript(messages: list[Message]) -> str:
    """Plain-text transcript, one paragraph per message, for the summariser."""
    out = []
    for m in messages:
        if m.role == "tool":
            out.append(f"Tool result ({m.name}): {m.content}")
        elif m.role == "assistant":
            calls = "".join(f"\n[called {c.name} {c.arguments}]" for c in m.tool_calls)
            out.append(f"Assistant: {m.content}{calls}")
        else:
            out.append(f"{m.role.capitalize()}: {m.content}")
    return "\n\n".join(out)


def summarize(
    engine: Any,
    messages: list[Message],
    *,
    previous: str | None,
    focus: str | None,
    sampling: SamplingParams,
    cancel: threading.Event | None = None,
) -> str | None:
    """One summary of `messages` (and the previous summary); None when cancelled."""
    task = (
        "Summarise this conversation so it can continue without the original: keep the "
        "user's goals, decisions, facts, file names, code and open questions."
    )
    if focus:
        task += f" Focus on: {focus}"
    text = render_transcript(messages)
    if previous:
        text = f"Earlier summary: {previous}\n\n{text}"
    s = Summarizer(engine, task, replace(sampling, temperature=0.0), cancel=cancel)
    from k3chat.documents import ReadStats, TextReader, chunks

    reader = TextReader(
        io.BytesIO(text.encode("utf-8")), max_para_chars=s.input_budget * 4, stats=ReadStats()
    )
    try:
        for chunk in chunks(engine, reader.paragraphs(), s.input_budget):
            s.add_chunk(chunk)
        return s.combined(s.input_budget).strip()
    except KeyboardInterrupt:
        if cancel is not None and cancel.is_set():
            return None
        raise
