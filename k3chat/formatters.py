"""One-shot output: `text` (the answer only), `json` (one object), `stream-json` (JSON lines).

stdout carries only the answer (or JSON); progress, thinking and the stats line go to stderr so
a pipe downstream receives clean data.
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

from k3chat.events import Compacted, Notice, ToolFinished, ToolStarted, TurnEnd
from k3chat_model.events import (
    PrefillProgress,
    Stats,
    TextDelta,
    ThinkingDelta,
    ToolCallParsed,
)


def stats_dict(st: Stats | None) -> dict[str, Any]:
    if st is None:
        return {}
    return {
        "prompt_tokens": st.prompt_tokens,
        "prefilled_tokens": st.prefilled_tokens,
        "completion_tokens": st.completion_tokens,
        "context_tokens": st.context_tokens,
    }


def stats_line(st: Stats) -> str:
    return (
        f"{st.prefilled_tokens} prompt tokens at {st.prompt_tps:.1f} t/s, "
        f"{st.completion_tokens} generated at {st.decode_tps:.1f} t/s ({st.finish_reason})"
    )


class Formatter:
    """Consumes conversation events; `finish()` writes what is left."""

    def __init__(
        self,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
        *,
        session_id: str | None = None,
        verbose: bool = False,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.session_id = session_id
        self.verbose = verbose
        self.t0 = time.monotonic()
        self.first_token_s: float | None = None
        self.text: list[str] = []
        self.usage = {"prompt_tokens": 0, "prefilled_tokens": 0, "completion_tokens": 0}
        self.finish_reason = "stop"
        self.last_stats: Stats | None = None
        self._in_thinking = False

    def handle(self, ev: Any) -> None:
        if isinstance(ev, TextDelta) and self.first_token_s is None:
            self.first_token_s = time.monotonic() - self.t0
        if isinstance(ev, Stats):
            self.last_stats = ev
            self.usage["prompt_tokens"] = ev.prompt_tokens
            self.usage["prefilled_tokens"] += ev.prefilled_tokens
            self.usage["completion_tokens"] += ev.completion_tokens
            self.finish_reason = ev.finish_reason
        if isinstance(ev, TurnEnd):
            self.text = [ev.text]
            if ev.interrupted:
                self.finish_reason = "cancelled"
        self.emit(ev)

    def emit(self, ev: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def timings(self) -> dict[str, float]:
        return {
            "total_s": round(time.monotonic() - self.t0, 4),
            "first_token_s": round(self.first_token_s, 4) if self.first_token_s else None,
        }

    def result(self) -> dict[str, Any]:
        return {
            "type": "result",
            "result": "".join(self.text),
            "session_id": self.session_id,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "timings": self.timings(),
        }

    def finish(self) -> None:
        self.out.flush()


class TextFormatter(Formatter):
    def emit(self, ev: Any) -> None:
        if isinstance(ev, TextDelta):
            if self._in_thinking:
                self.err.write("\n")
                self._in_thinking = False
            self.out.write(ev.text)
            self.out.flush()
        elif isinstance(ev, ThinkingDelta):
            self._in_thinking = True
            self.err.write(ev.text)
            self.err.flush()
        elif isinstance(ev, ToolStarted):
            self.err.write(f"[tool] {ev.call.name} {json.dumps(ev.call.arguments)}\n")
        elif isinstance(ev, ToolFinished):
            state = "denied" if ev.denied else ("ok" if ev.ok else "failed")
            self.err.write(f"[tool] {ev.call.name}: {state}\n")
        elif isinstance(ev, (Notice, Compacted)):
            text = ev.text if isinstance(ev, Notice) else "older turns were summarised"
            self.err.write(f"k3chat: {text}\n")
        elif isinstance(ev, Stats) and self.verbose:
            self.err.write(stats_line(ev) + "\n")

    def finish(self) -> None:
        text = "".join(self.text)
        if text and not text.endswith("\n"):
            self.out.write("\n")
        self.out.flush()


class JsonFormatter(Formatter):
    def emit(self, ev: Any) -> None:
        if isinstance(ev, (Notice, Compacted)):
            text = ev.text if isinstance(ev, Notice) else "older turns were summarised"
            self.err.write(f"k3chat: {text}\n")

    def finish(self) -> None:
        self.out.write(json.dumps(self.result(), ensure_ascii=False) + "\n")
        self.out.flush()


def event_dict(ev: Any) -> dict[str, Any] | None:
    """The stream-json form of one event (None for events not streamed)."""
    if isinstance(ev, TextDelta):
        return {"type": "text", "text": ev.text}
    if isinstance(ev, ThinkingDelta):
        return {"type": "thinking", "text": ev.text}
    if isinstance(ev, PrefillProgress):
        return {"type": "prefill", "done": ev.done, "total": ev.total}
    if isinstance(ev, ToolCallParsed):
        return {"type": "tool_call_parsed", "name": ev.call.name, "arguments": ev.call.arguments}
    if isinstance(ev, ToolStarted):
        return {
            "type": "tool_call",
            "name": ev.call.name,
            "arguments": ev.call.arguments,
            "index": ev.call.index,
        }
    if isinstance(ev, ToolFinished):
        return {
            "type": "tool_result",
            "name": ev.call.name,
            "index": ev.call.index,
            "output": ev.output,
            "ok": ev.ok,
            "denied": ev.denied,
        }
    if isinstance(ev, Stats):
        return {
            "type": "stats",
            **stats_dict(ev),
            "finish_reason": ev.finish_reason,
            "prefill_s": ev.prefill_s,
            "decode_s": ev.decode_s,
        }
    if isinstance(ev, Compacted):
        return {
            "type": "compaction",
            "summary": ev.summary,
            "removed_messages": ev.removed_messages,
        }
    if isinstance(ev, Notice):
        return {"type": "notice", "level": ev.level, "text": ev.text}
    if isinstance(ev, TurnEnd):
        return {"type": "turn_end", "interrupted": ev.interrupted}
    return None


class StreamJsonFormatter(Formatter):
    def emit(self, ev: Any) -> None:
        d = event_dict(ev)
        if d is not None:
            self.out.write(json.dumps(d, ensure_ascii=False) + "\n")
            self.out.flush()

    def finish(self) -> None:
        self.out.write(json.dumps(self.result(), ensure_ascii=False) + "\n")
        self.out.flush()


FORMATS = {"text": TextFormatter, "json": JsonFormatter, "stream-json": StreamJsonFormatter}
