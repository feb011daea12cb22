"""One conversation: turns in, engine events out, the session log kept in step.

The TUI, the line mode and the one-shot mode are thin views over `Conversation`, so all three
behave the same. The session log is the single source of truth: `Conversation.resume` rebuilds
exactly the message list the model saw (system prompt, compaction summary, interrupted partial
replies, tool calls and results) from it, and uses the engine snapshot only to skip prefill.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from k3chat import compaction
from k3chat.errors import ContextFull
from k3chat.events import Compacted, ConvEvent, Notice, ToolFinished, ToolStarted, TurnEnd
from k3chat.session_migrations import make_title
from k3chat_model.events import (
    Message,
    SamplingParams,
    Stats,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallParsed,
)

if TYPE_CHECKING:
    from k3chat.session import Session

INTERRUPTED_TOOL_RESULT = "interrupted: the tool call did not complete"
SUMMARY_HEADER = "Summary of the earlier part of this conversation:"
AUTO_COMPACT_AT = 0.85
"""Fraction of the context window at which older turns are summarised before a turn."""


def _cancelled(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def _call_to_json(c: ToolCall) -> dict:
    return {"name": c.name, "arguments": c.arguments, "index": c.index, "id": c.id}


def _call_from_json(d: dict) -> ToolCall:
    return ToolCall(
        name=d.get("name", ""),
        arguments=d.get("arguments") or {},
        index=int(d.get("index", 1)),
        id=d.get("id", ""),
    )


class Transcript:
    """What the model sees, rebuilt from (or kept in step with) the event log."""

    def __init__(self) -> None:
        self.system: str | None = None
        self.summary: str | None = None
        self.history: list[Message] = []
        self.interrupted_at: list[int] = []
        """Indexes into `history` of assistant replies that were cut off (Ctrl-C, kill)."""

    def apply(self, ev: dict) -> None:
        """Fold one logged event into the transcript (the replay rule for each type)."""
        t = ev.get("type")
        if t == "system":
            self.system = ev.get("content") or None
        elif t == "user":
            self.history.append(Message("user", ev.get("content", "")))
        elif t == "assistant":
            calls = [_call_from_json(c) for c in ev.get("tool_calls") or []]
            msg = Message("assistant", ev.get("content", ""), ev.get("thinking"), calls)
            if ev.get("status", "complete") != "complete":
                self.interrupted_at.append(len(self.history))
            self.history.append(msg)
        elif t == "tool_result":
            self.history.append(
                Message(
                    "tool",
                    ev.get("content", ""),
                    name=ev.get("name"),
                    tool_index=ev.get("tool_index"),
                )
            )
        elif t == "compaction":
            keep = int(ev.get("keep", 0))
            cut = len(self.history) - keep
            self.history = self.history[cut:] if keep else []
            self.interrupted_at = [i - cut for i in self.interrupted_at if i >= cut]
            self.summary = ev.get("summary") or None
        # "session", "tool_call" and "interrupted" are bookkeeping; the model never sees them

    def messages(self) -> list[Message]:
        system = self.system or ""
        if self.summary:
            # the summary rides in the system message: chat formats allow one system turn
            system = (system + "\n\n" if system else "") + f"{SUMMARY_HEADER}\n{self.summary}"
        head = [Message("system", system)] if system else []
        return head + self.history

    def unanswered_calls(self) -> list[ToolCall]:
        """Tool calls of the last assistant message that have no tool result yet."""
        for i in range(len(self.history) - 1, -1, -1):
            m = self.history[i]
            if m.role == "assistant":
                answered = {r.tool_index for r in self.history[i + 1 :] if r.role == "tool"}
                return [c for c in m.tool_calls if c.index not in answered]
            if m.role == "user":
                return []
        return []


class Conversation:
    """A chat with one engine, persisted to one session (or none with `--no-save`)."""

    def __init__(
        self,
        engine: Any,
        session: Session | None,
        *,
        sampling: SamplingParams,
        system: str | None = None,
        thinking: bool = False,
        agent: Any = None,
        max_steps: int = 20,
        keep_turns: int = 2,
    ) -> None:
        self.engine = engine
        self.session = session
        self.sampling = sampling
        self.thinking = thinking
        self.agent = agent
        self.max_steps = max_steps
        self.keep_turns = keep_turns
        self.transcript = Transcript()
        self.last_stats: Stats | None = None
        self.context_used = 0
        self.warnings: list[str] = []
        if system:
            self.set_system(system)

    # -- resume ------------------------------------------------------------------------
    @classmethod
    def resume(cls, engine: Any, session: Session, **kw: Any) -> Conversation:
        """Rebuild a conversation from `session`'s log; load the snapshot when it matches.

        Dangling tool calls get a synthetic tool result and a user message left without a
        reply gets an empty interrupted reply, both appended to the log, so the next request
        is well formed (a killed tool call must not break every later turn).
        """
        system = kw.pop("system", None)
        conv = cls(engine, session, **kw)
        for ev in session.events():
            conv.transcript.apply(ev)
        conv.warnings = list(session.warnings)
        conv._repair()
        if system is not None and system != conv.transcript.system:
            conv.set_system(system)
        conv._load_snapshot()
        conv.context_used = conv.count_context()
        return conv

    def _repair(self) -> None:
        t = self.transcript
        missing = t.unanswered_calls()
        if missing:
            self._log("interrupted", reason="tool calls without results", calls=len(missing))
            for c in missing:
                self._add_tool_result(c, INTERRUPTED_TOOL_RESULT, ok=False, denied=False)
            self.warnings.append(
                f"{len(missing)} tool call(s) did not complete last time; marked interrupted"
            )
        elif t.history and t.history[-1].role == "user":
            self._log("interrupted", reason="no reply was saved for the last user message")
            self._add_assistant("", None, [], status="interrupted")
            self.warnings.append("the last reply was cut off before it was saved")

    def _load_snapshot(self) -> None:
        from k3chat_model.errors import StateMismatch

        s = self.session
        if s is None or not s.state_dir.is_dir():
            return
        try:
            self.engine.load_state(s.state_dir)
        except StateMismatch as e:
            self.warnings.append(f"engine snapshot not used ({e.msg}); re-reading the history")
        except Exception as e:  # a damaged snapshot is only a lost speed-up
            self.warnings.append(f"engine snapshot unreadable ({e}); re-reading the history")

    # -- public state --------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        return self.transcript.messages()

    @property
    def context_limit(self) -> int:
        return int(self.engine.context_length)

    @property
    def session_id(self) -> str | None:
        return self.session.id if self.session else None

    def tools(self) -> list[dict] | None:
        if self.agent is None or not getattr(self.engine, "supports_tools", False):
            return None
        return self.agent.registry.declarations()

    def count_context(self) -> int:
        return int(self.engine.count_message_tokens(self.messages, self.tools(), self.thinking))

    def set_system(self, text: str | None) -> None:
        self.transcript.system = text or None
        self._log("system", content=text or None)

    def set_thinking(self, on: bool) -> None:
        self.thinking = bool(on)
        if self.session:
            self.session.update_meta(thinking=self.thinking)

    # -- logging helpers -------------------------------------------------------------------
    def _log(self, type: str, **fields: Any) -> None:
        if self.session is not None:
            self.session.append(type, **fields)

    def _add_assistant(
        self, text: str, thinking: str | None, calls: list[ToolCall], *, status: str
    ) -> None:
        self._log(
            "assistant",
            content=text,
            thinking=thinking or None,
            tool_calls=[_call_to_json(c) for c in calls],
            status=status,
        )
        self.transcript.apply(
            {
                "type": "assistant",
                "content": text,
                "thinking": thinking or None,
                "tool_calls": [_call_to_json(c) for c in calls],
                "status": status,
            }
        )

    def _add_tool_result(self, call: ToolCall, content: str, *, ok: bool, denied: bool) -> None:
        self._record_tool_result(
            {
                "name": call.name,
                "tool_index": call.index,
                "call_id": call.id,
                "content": content,
                "ok": ok,
                "denied": denied,
            }
        )

    def _record_tool_result(self, fields: dict[str, Any]) -> None:
        """Log a `tool_result` event (with any audit fields) and show it to the model."""
        self._log("tool_result", **fields)
        self.transcript.apply({"type": "tool_result", **fields})

    # -- turns -----------------------------------------------------------------------------
    def send(self, text: str, *, cancel: threading.Event | None = None) -> Iterator[ConvEvent]:
        """Run one user turn (with tool steps when an agent is attached), yielding events.

        The user message is logged before generation; the reply is logged with status
        complete, interrupted (cancel set, or KeyboardInterrupt) or error.
        """
        yield from self._maybe_auto_compact(text, cancel)
        self._log("user", content=text)
        self.transcript.apply({"type": "user", "content": text})
        if self.session and not self.session.meta.get("title"):
            self.session.update_meta(title=make_title(text))
        final_text = ""
        interrupted = False
        finish = "stop"
        for step in range(self.max_steps):
            text_out, thinking, calls, finish = yield from self._generate(cancel)
            final_text = text_out
            if finish == "cancelled":
                interrupted = True
                break
            if finish != "tool_calls" or not calls:
                break
            if self.agent is None:
                for c in calls:
                    self._add_tool_result(c, "error: tools are not enabled", ok=False, denied=True)
                break
            if not (yield from self._run_tools(calls, cancel)):
                interrupted = True
                break
            if step == self.max_steps - 1:
                yield Notice(f"stopped after {self.max_steps} tool steps", "warning")
        self._end_turn()
        yield TurnEnd(final_text, interrupted, finish)

    def _generate(self, cancel: threading.Event | None):
        """One engine call; logs the assistant message. Returns (text, thinking, calls, finish)."""
        text: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        status = "error"
        try:
            for ev in self.engine.generate(
                self.messages,
                tools=self.tools(),
                sampling=self.sampling,
                thinking=self.thinking,
                cancel=cancel,
            ):
                if isinstance(ev, TextDelta):
                    text.append(ev.text)
                elif isinstance(ev, ThinkingDelta):
                    thinking.append(ev.text)
                elif isinstance(ev, ToolCallParsed):
                    calls.append(ev.call)
                elif isinstance(ev, Stats):
                    self.last_stats = ev
                    self.context_used = ev.context_tokens or (
                        ev.prompt_tokens + ev.completion_tokens
                    )
                yield ev
            stats = self.last_stats
            finish = stats.finish_reason if stats else "stop"
            status = "interrupted" if finish == "cancelled" else "complete"
        except (KeyboardInterrupt, GeneratorExit):
            status = "interrupted"
            raise
        finally:
            # always log what the model said, even when the stream died half-way
            self._add_assistant("".join(text), "".join(thinking) or None, calls, status=status)
            if status == "error" or (status == "interrupted" and not _cancelled(cancel)):
                self._end_turn(snapshot=False)
        return "".join(text), "".join(thinking) or None, calls, finish

    def _run_tools(self, calls: list[ToolCall], cancel: threading.Event | None):
        """Run each call through the agent's executor; False when cancelled part-way."""
        for c in calls:
            if cancel is not None and cancel.is_set():
                self._add_tool_result(c, INTERRUPTED_TOOL_RESULT, ok=False, denied=False)
                continue
            self._log("tool_call", call=_call_to_json(c))
            yield ToolStarted(c)
            # the executor answers malformed calls too, with a hint the model can act on;
            # `cancel` lets Ctrl-C kill a running shell command (its whole process group)
            outcome = self.agent.executor.run(c, cancel=cancel)
            # event_fields adds `approval` and `saved_path`: the audit trail of the call
            self._record_tool_result(outcome.event_fields())
            yield ToolFinished(c, outcome.content, outcome.ok, outcome.denied)
        return not (cancel is not None and cancel.is_set())

    def _end_turn(self, *, snapshot: bool = True) -> None:
        s = self.session
        if s is None:
            return
        st = self.last_stats
        tokens = dict(s.meta.get("tokens") or {})
        if st is not None:
            tokens["prompt"] = tokens.get("prompt", 0) + st.prefilled_tokens
            tokens["completion"] = tokens.get("completion", 0) + st.completion_tokens
            tokens["context"] = self.context_used
        n = sum(1 for m in self.transcript.history if m.role in ("user", "assistant"))
        s.update_meta(messages=max(n, int(s.meta.get("messages", 0))), tokens=tokens)
        if snapshot:
            self.save_snapshot()

    def save_snapshot(self) -> None:
        """engine.save_state into state.tmp, then swap it in: a kill leaves old or new."""
        s = self.session
        if s is None:
            return
        tmp, old = s.dir / "state.tmp", s.dir / "state.old"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            self.engine.save_state(tmp)
            if s.state_dir.exists():
                s.state_dir.rename(old)
            tmp.rename(s.state_dir)
            shutil.rmtree(old, ignore_errors=True)
        except Exception as e:  # the snapshot only saves prefill time; never fail a turn
            self.warnings.append(f"could not save the engine snapshot: {e}")

    # -- compaction ------------------------------------------------------------------------
    def _maybe_auto_compact(self, text: str, cancel: threading.Event | None):
        limit = self.context_limit
        reserve = self.sampling.max_tokens
        needed = self.count_context() + self.engine.count_tokens(text) + 8 + reserve
        if self.context_used < AUTO_COMPACT_AT * limit and needed <= limit:
            return
        if compaction.split_point(self.transcript.history, self.keep_turns) > 0:
            yield Notice(
                f"context {self.context_used}/{limit} tokens: summarising older turns", "info"
            )
            yield from self.compact(cancel=cancel)
        if self.count_context() + self.engine.count_tokens(text) + 8 + reserve > limit:
            # keep fewer turns before giving up
            if compaction.split_point(self.transcript.history, 0) > 0:
                yield from self.compact(cancel=cancel, keep_turns=0)
        if self.count_context() + self.engine.count_tokens(text) + 8 > limit:
            raise ContextFull(
                f"the message ({self.engine.count_tokens(text)} tokens) does not fit in the "
                f"model's context ({limit} tokens)",
                hint="pipe long text on stdin: `k3chat -p PROMPT < file` summarises it in parts",
            )

    def compact(
        self,
        focus: str | None = None,
        *,
        cancel: threading.Event | None = None,
        keep_turns: int | None = None,
    ) -> Iterator[ConvEvent]:
        """Summarise all but the last `keep_turns` user turns into a `compaction` event."""
        keep_turns = self.keep_turns if keep_turns is None else keep_turns
        h = self.transcript.history
        cut = compaction.split_point(h, keep_turns)
        if cut <= 0:
            yield Notice("nothing to compact yet", "info")
            return
        summary = compaction.summarize(
            self.engine,
            h[:cut],
            previous=self.transcript.summary,
            focus=focus,
            sampling=replace(self.sampling, max_tokens=compaction.summary_budget(self.engine)),
            cancel=cancel,
        )
        if summary is None:
            yield Notice("compaction cancelled", "warning")
            return
        keep = len(h) - cut
        self._log("compaction", summary=summary, keep=keep, removed_messages=cut, focus=focus)
        self.transcript.apply({"type": "compaction", "summary": summary, "keep": keep})
        self.context_used = self.count_context()
        self._end_turn(snapshot=False)
        yield Compacted(summary, cut)
