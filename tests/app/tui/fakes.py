"""Scripted doubles for the TUI tests.

`ScriptedConversation` yields a fixed list of `ConvEvent`s per `send()`: pixel snapshots need
byte-identical output, which the real `Conversation` cannot promise on every machine, so the
script enters at the `Conversation` boundary (STYLE.md item 15). Behaviour tests use the real
`Conversation` over `stubs.fake_engine.FakeEngine` instead.
"""

from __future__ import annotations

import threading
from typing import Any

from k3chat.events import TurnEnd
from k3chat_model.events import Message, SamplingParams, Stats, TextDelta

WAIT_FOR_CANCEL = object()
"""Script marker: block until the turn's cancel flag is set, then end as interrupted."""


class StaticEngine:
    """Just the engine attributes the status bar and /model read."""

    model_id = "k3-smol"
    quantization = "nf4"
    context_length = 8192
    config_hash = "0123456789abcdef"
    supports_thinking = True
    supports_tools = True
    default_sampling = SamplingParams(temperature=0.0)

    def memory_report(self) -> dict[str, int]:
        return {"weights": 900 * 2**20, "cache_ram": 124 * 2**20, "cache_disk": 0}


class ScriptedConversation:
    def __init__(
        self,
        turns: list[list[Any]] | None = None,
        *,
        history: list[Message] | None = None,
        session: Any = None,
        context_used: int = 0,
    ) -> None:
        self.turns = list(turns or [])
        self.engine = StaticEngine()
        self.session = session
        self.messages: list[Message] = list(history or [])
        self.context_used = context_used
        self.context_limit = self.engine.context_length
        self.last_stats: Stats | None = None
        self.thinking = False
        self.system: str | None = None
        self.sent: list[str] = []
        self.warnings: list[str] = []

    @property
    def session_id(self) -> str | None:
        return self.session.id if self.session else None

    def send(self, text: str, *, cancel: threading.Event | None = None):
        self.sent.append(text)
        self.messages.append(Message("user", text))
        script = self.turns.pop(0) if self.turns else [TextDelta("ok"), TurnEnd("ok", False)]
        reply = ""
        for ev in script:
            if ev is WAIT_FOR_CANCEL:
                assert cancel is not None and cancel.wait(10), "test never pressed Ctrl-C"
                yield Stats(10, 10, len(reply.split()), 0.1, 0.5, "cancelled", 20)
                yield TurnEnd(reply, True, "cancelled")
                break
            if isinstance(ev, TextDelta):
                reply += ev.text
            if isinstance(ev, Stats):
                self.last_stats = ev
                self.context_used = ev.context_tokens
            yield ev
        self.messages.append(Message("assistant", reply))

    def compact(self, focus: str | None = None, *, cancel: threading.Event | None = None):
        yield from ()

    def set_system(self, text: str | None) -> None:
        self.system = text

    def set_thinking(self, on: bool) -> None:
        self.thinking = on
