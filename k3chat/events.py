"""Events a `Conversation` yields on top of the engine's own stream.

Views (TUI, line mode, one-shot formatters) `match` on these and on the engine events
(`PrefillProgress`, `ThinkingDelta`, `TextDelta`, `ToolCallParsed`, `Stats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from k3chat_model.events import (
    PrefillProgress,
    Stats,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallParsed,
)


@dataclass
class ToolStarted:
    """The agent has taken `call`: yielded BEFORE approval is asked and before it runs.

    A view shows the call as pending here; if the mode needs approval, the approver is asked
    right after the consumer resumes the stream, and `ToolFinished` says how it ended
    (`denied` when refused).
    """

    call: ToolCall


@dataclass
class ToolFinished:
    call: ToolCall
    output: str
    """What the model sees (possibly truncated by the executor)."""
    ok: bool
    denied: bool = False


@dataclass
class Compacted:
    """Older turns were replaced by `summary` in what the model sees (the log keeps them)."""

    summary: str
    removed_messages: int


@dataclass
class TurnEnd:
    """One `send()` is over; `text` is the final assistant text of the turn."""

    text: str
    interrupted: bool
    finish_reason: str = "stop"


@dataclass
class Notice:
    """A one-line message for the user (a warning, an auto-compaction announcement)."""

    text: str
    level: str = "info"
    """"info" | "warning"."""


ConvEvent = Union[
    PrefillProgress,
    ThinkingDelta,
    TextDelta,
    ToolCallParsed,
    Stats,
    ToolStarted,
    ToolFinished,
    Compacted,
    TurnEnd,
    Notice,
]
