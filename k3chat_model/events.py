"""The engine's public value types: sampling settings, messages, and streamed events.

`Engine.generate()` yields a stream of `EngineEvent`s; the app renders them and never
touches token ids. Every type here is a plain dataclass so it can be logged as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union


@dataclass
class SamplingParams:
    """How to pick the next token. temperature == 0 means greedy."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 40
    repetition_penalty: float = 1.1
    repetition_window: int = 256
    """Only the last N tokens (prompt + reply) are penalised."""
    seed: int | None = None
    max_tokens: int = 1024
    stop_token_ids: tuple[int, ...] = ()
    """Extra stop ids on top of the model's own end-of-message tokens."""


@dataclass
class ToolCall:
    """One complete tool call parsed from the model's output."""

    name: str
    arguments: dict[str, Any]
    index: int = 1
    """1-based position among the calls of one assistant message (K3 `index` attribute)."""
    id: str = ""
    error: str | None = None
    """Set when the call was malformed (arguments not parseable); `arguments` is then {}."""


@dataclass
class Message:
    """One chat message as the engine's chat formats consume it.

    role: "system" | "user" | "assistant" | "tool".
    For role="tool", `name` is the tool's name and `tool_index` the index of the call answered.
    """

    role: str
    content: str = ""
    thinking: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    name: str | None = None
    tool_index: int | None = None


@dataclass
class TextDelta:
    text: str


@dataclass
class ThinkingDelta:
    text: str


@dataclass
class ToolCallParsed:
    call: ToolCall


@dataclass
class PrefillProgress:
    done: int
    total: int


FinishReason = Literal["stop", "length", "cancelled", "tool_calls", "error"]


@dataclass
class Stats:
    """Emitted once, last, by every generation."""

    prompt_tokens: int
    """Tokens in the whole rendered prompt."""
    prefilled_tokens: int
    """Tokens actually computed (the rest came from the cache)."""
    completion_tokens: int
    prefill_s: float
    decode_s: float
    finish_reason: FinishReason
    context_tokens: int = 0
    """Tokens the cache covers after this turn."""
    peak_bytes: int = 0

    @property
    def prompt_tps(self) -> float:
        return self.prefilled_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.completion_tokens / self.decode_s if self.decode_s > 0 else 0.0


EngineEvent = Union[TextDelta, ThinkingDelta, ToolCallParsed, PrefillProgress, Stats]
