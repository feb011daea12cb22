"""Maps each conversation event to a widget update (STYLE.md item 13).

One `match` per event class, no logic about what a turn means: `Conversation` decides that and
this module only renders it. `handle` is async so a new widget is mounted before the next event
touches it; the worker thread calls it through `App.call_from_thread`, which awaits it.
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.widget import Widget

from k3chat.events import Compacted, Notice, ToolFinished, ToolStarted, TurnEnd
from k3chat.tui.widgets.message import AssistantMessage
from k3chat.tui.widgets.notice import Notice as NoticeLine
from k3chat.tui.widgets.status_bar import StatusBar
from k3chat.tui.widgets.thinking import ThinkingBlock
from k3chat.tui.widgets.tool_call import ToolCallView
from k3chat_model.events import (
    PrefillProgress,
    Stats,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallParsed,
)


def stats_line(stats: Stats) -> str:
    """The per-reply footer: tokens, decode speed, prefill speed, time."""
    total_s = stats.prefill_s + stats.decode_s
    line = f"{stats.completion_tokens} tokens · {stats.decode_tps:.1f} tok/s"
    if stats.prefilled_tokens:
        line += f" · prefill {stats.prefilled_tokens} @ {stats.prompt_tps:.0f} tok/s"
    line += f" · {total_s:.1f}s"
    if stats.finish_reason == "length":
        line += " · hit max tokens"
    return line


class EventRouter:
    """Keeps the widgets of the generation in progress and updates them per event."""

    def __init__(self, log: VerticalScroll, status: StatusBar) -> None:
        self.log = log
        self.status = status
        self.reply: AssistantMessage | None = None
        """The reply of the current generation step, None before its first text."""
        self.last_reply: AssistantMessage | None = None
        """The most recent reply of this turn; TurnEnd marks it interrupted."""
        self.thinking: ThinkingBlock | None = None
        self.tools: dict[tuple[int, str], ToolCallView] = {}
        self._footer = ""

    async def handle(self, event: object) -> None:
        match event:
            case PrefillProgress(done=done, total=total):
                pct = 100 * done // total if total else 100
                self.status.activity = f"prefill {pct}%"
            case ThinkingDelta(text=text):
                if self.thinking is None:
                    self.thinking = await self._mount(ThinkingBlock())
                self.thinking.append(text)
                self.status.activity = "thinking"
            case TextDelta(text=text):
                self._close_thinking()
                if self.reply is None:
                    self.reply = self.last_reply = await self._mount(AssistantMessage())
                self.reply.append(text)
                self.status.activity = "generating"
            case ToolCallParsed(call=call):
                await self._tool_view(call)
            case ToolStarted(call=call):
                (await self._tool_view(call)).started()
                self.status.activity = f"running {call.name}"
            case ToolFinished(call=call, output=output, ok=ok, denied=denied):
                (await self._tool_view(call)).finished(output, ok=ok, denied=denied)
            case Compacted(removed_messages=removed):
                await self._mount(
                    NoticeLine(f"↻ compacted {removed} earlier messages into a summary")
                )
            case Notice(text=text, level=level):
                await self._mount(NoticeLine(text, level=level))
            case Stats() as stats:
                self._end_step(stats)
            case TurnEnd(interrupted=interrupted):
                await self._end_turn(interrupted)
            case _:
                pass

    async def error(self, exc: BaseException) -> None:
        """A turn failed: keep what streamed, show the error as one line."""
        await self._end_turn(interrupted=False)
        await self._mount(NoticeLine(f"error: {exc}", level="error"))

    async def _mount(self, widget: Widget) -> Widget:
        await self.log.mount(widget)
        return widget

    async def _tool_view(self, call: ToolCall) -> ToolCallView:
        key = (call.index, call.name)
        view = self.tools.get(key)
        if view is None:
            self._close_thinking()
            self._close_reply()
            view = self.tools[key] = await self._mount(ToolCallView(call))
        return view

    def _close_thinking(self) -> None:
        if self.thinking is not None:
            self.thinking.finish()
            self.thinking = None

    def _close_reply(self, footer: str = "") -> None:
        if self.reply is not None:
            self.reply.finish(footer=footer)
            self.reply = None

    def _end_step(self, stats: Stats) -> None:
        """One generation ended (the turn may go on with tool calls)."""
        self._footer = stats_line(stats)
        self._close_thinking()
        self._close_reply(self._footer)
        self.status.decode_tps = stats.decode_tps
        if stats.context_tokens:
            self.status.context_used = stats.context_tokens
        self.status.activity = ""

    async def _end_turn(self, interrupted: bool) -> None:
        self._close_thinking()
        self._close_reply(self._footer)
        if interrupted:
            if self.last_reply is None:
                self.last_reply = await self._mount(AssistantMessage())
            self.last_reply.finish(interrupted=True, footer=self._footer)
        self.reply = self.last_reply = None
        self.tools.clear()
        self._footer = ""
        self.status.activity = ""
