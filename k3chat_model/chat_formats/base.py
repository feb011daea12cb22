"""What every chat format provides: prompt ids for a conversation, stop ids, and an output parser.

The engine works on token ids only; a :class:`ChatFormat` owns the text on both sides of the
model (STYLE.md §10): it renders ``Message`` lists into prompt ids and, through a
:class:`StreamParser`, turns generated ids back into thinking, text and tool calls.
"""

from __future__ import annotations

from typing import Union

from k3chat_model.errors import K3Error
from k3chat_model.events import Message, TextDelta, ThinkingDelta, ToolCallParsed

ParsedEvent = Union[TextDelta, ThinkingDelta, ToolCallParsed]


class ChatFormatError(K3Error):
    """A conversation the chat format cannot render (e.g. a tool result with no tool name)."""


class StreamParser:
    """Incremental parser of one assistant reply, starting right after the generation prompt."""

    def feed(self, token_id: int) -> list[ParsedEvent]:
        """Consume one generated id; return the events it completes (often none)."""
        raise NotImplementedError

    def finish(self) -> list[ParsedEvent]:
        """Flush held-back text; an unterminated tool call comes back with ``error`` set."""
        raise NotImplementedError


class ChatFormat:
    """Renders conversations to prompt ids and parses replies."""

    supports_tools: bool = False
    native_tools: bool = False
    """The model was trained with this format's tool declarations (not a prompted-in fallback)."""
    supports_thinking: bool = False

    def encode(
        self,
        messages: list[Message],
        *,
        tools: list[dict] | None = None,
        thinking: bool = False,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Prompt ids for ``messages`` (+ tool declarations), ending with the generation prompt."""
        raise NotImplementedError

    def stop_token_ids(self) -> list[int]:
        """Ids that end the assistant's turn."""
        raise NotImplementedError

    def new_parser(self, *, thinking: bool) -> StreamParser:
        """A parser for the reply to a prompt encoded with the same ``thinking`` flag."""
        raise NotImplementedError


def parsed_text(events: list[ParsedEvent]) -> tuple[str, str, list]:
    """(thinking, text, tool calls) joined from a list of events; handy for callers and tests."""
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [e.call for e in events if isinstance(e, ToolCallParsed)]
    return thinking, text, calls
