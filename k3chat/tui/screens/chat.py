"""The chat screen: transcript, prompt, status bar; runs turns on a worker thread.

A turn is `Conversation.send()` iterated on a `@work(thread=True, exclusive=True)` worker;
every event goes back to the UI thread through `call_from_thread` into the `EventRouter`.
Ctrl-C sets the turn's cancel flag; the conversation then ends the stream itself, so the
partial reply is both shown and logged as interrupted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from k3chat import commands
from k3chat.tui.event_router import EventRouter
from k3chat.tui.widgets.input import PromptInput
from k3chat.tui.widgets.message import AssistantMessage, UserMessage
from k3chat.tui.widgets.notice import Notice
from k3chat.tui.widgets.status_bar import StatusBar
from k3chat.tui.widgets.thinking import ThinkingBlock
from k3chat.tui.widgets.tool_call import ToolCallView

EventSource = Callable[[threading.Event], Iterable[object]]
"""Starts a stream of conversation events given the turn's cancel flag."""


class ChatScreen(Screen[None]):
    """Shows one conversation; the app swaps the conversation in with `attach()`."""

    CSS_PATH = Path(__file__).with_suffix(".tcss")
    BINDINGS = [Binding("ctrl+o", "copy_reply", "Copy last reply", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.conversation: Any = None
        """The `k3chat.conversation.Conversation` shown, None until the app attaches one."""
        self.cancel: threading.Event | None = None
        """The running turn's cancel flag; None when idle."""
        self.router: EventRouter | None = None

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        yield VerticalScroll(id="log")
        yield Static("", id="hints", markup=False)
        yield PromptInput(commands=commands.NAMES, id="prompt")
        yield StatusBar(id="status")

    def on_mount(self) -> None:
        log = self.query_one("#log", VerticalScroll)
        log.anchor()
        self.router = EventRouter(log, self.query_one(StatusBar))
        prompt = self.query_one(PromptInput)
        prompt.border_subtitle = "Enter send · Ctrl+J newline · Ctrl+C stop · /help"
        prompt.focus()

    @property
    def busy(self) -> bool:
        return self.cancel is not None

    # -- conversation --------------------------------------------------------------------
    async def attach(self, conversation: Any) -> None:
        """Show `conversation`: clear the transcript, replay its history, refresh the status."""
        self.conversation = conversation
        log = self.query_one("#log", VerticalScroll)
        await log.remove_children()
        for widget in history_widgets(conversation):
            await log.mount(widget)
        for warning in getattr(conversation, "warnings", []):
            await log.mount(Notice(warning, level="warning"))
        if getattr(self.app, "attachment", None):
            names = ", ".join(getattr(self.app, "attachment_names", [])) or "file"
            await log.mount(Notice(f"attached: {names} (sent with your first message)"))
        session = getattr(conversation, "session", None)
        if session is not None:
            self.sub_title = session.meta.get("name") or session.meta.get("title") or session.id
        else:
            self.sub_title = "not saved"
        self.refresh_status()
        log.scroll_end(animate=False)

    def refresh_status(self, memory: int | None = None) -> None:
        conv = self.conversation
        status = self.query_one(StatusBar)
        if conv is None:
            return
        engine = getattr(conv, "engine", None)
        status.model = getattr(engine, "model_id", "") or ""
        status.quantization = getattr(engine, "quantization", None)
        status.context_used = int(getattr(conv, "context_used", 0) or 0)
        status.context_limit = int(getattr(conv, "context_limit", 0) or 0)
        stats = getattr(conv, "last_stats", None)
        status.decode_tps = stats.decode_tps if stats is not None else None
        if memory is not None:
            status.memory_bytes = memory

    # -- input ---------------------------------------------------------------------------
    def on_text_area_changed(self, event: PromptInput.Changed) -> None:
        hints = self.query_one("#hints", Static)
        names = (
            event.text_area.matching_commands() if isinstance(event.text_area, PromptInput) else []
        )
        rows = [c for c in commands.COMMANDS if c[0] in names]
        hints.update("\n".join(f"{name} {args}  — {help}" for name, args, help in rows))
        hints.display = bool(rows)

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        command = commands.parse(event.text)
        if command is not None:
            await self.app.run_command(*command)  # type: ignore[attr-defined]
            return
        await self.send(event.text)

    async def send(self, text: str) -> None:
        if self.conversation is None:
            self.app.notify("The model is still loading.", severity="warning")
            return
        if self.busy:
            self.app.notify("Wait for the reply, or press Ctrl+C to stop it.", severity="warning")
            return
        await self.query_one("#log", VerticalScroll).mount(UserMessage(text))
        attachment = getattr(self.app, "attachment", None)
        if attachment:
            # `-f FILE`: the files ride in front of the first message, as in line mode
            from k3chat.documents import document_prompt

            text = document_prompt(attachment, text)
            self.app.attachment = None  # type: ignore[attr-defined]
        conv = self.conversation
        self.start_stream(lambda cancel: conv.send(text, cancel=cancel))

    def start_stream(self, source: EventSource) -> None:
        """Run `source` on the worker; the cancel flag exists before the thread starts."""
        self.cancel = threading.Event()
        approver = getattr(self.app, "approver", None)
        if approver is not None:
            approver.cancel = self.cancel
        self.query_one(StatusBar).activity = "waiting for the model"
        self._stream(source, self.cancel)

    def interrupt(self) -> bool:
        """Ctrl-C: stop the running turn. False when nothing was running."""
        if self.cancel is None:
            return False
        self.cancel.set()
        self.query_one(StatusBar).activity = "stopping…"
        return True

    def action_copy_reply(self) -> None:
        """Ctrl+O: the last reply's Markdown to the clipboard (OSC 52, works over ssh)."""
        replies = self.query(AssistantMessage)
        if not replies:
            self.app.notify("No reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(replies.last().text)
        self.app.notify("Copied the last reply.")

    # -- worker --------------------------------------------------------------------------
    def _stream(self, source: EventSource, cancel: threading.Event) -> None:
        self.run_worker(
            lambda: self._stream_thread(source, cancel),
            thread=True,
            exclusive=True,
            group="turn",
            exit_on_error=False,
        )

    def _stream_thread(self, source: EventSource, cancel: threading.Event) -> None:
        app = self.app
        router = self.router
        assert router is not None

        def ui(callback: Callable[..., Any], *args: Any) -> None:
            try:
                app.call_from_thread(callback, *args)
            except RuntimeError:
                # the app closed mid-turn: stop the model, let the conversation log the rest
                cancel.set()

        try:
            for event in source(cancel):
                ui(router.handle, event)
        except Exception as exc:
            ui(router.error, exc)
        finally:
            ui(self._stream_done, memory_in_use(self.conversation))

    def _stream_done(self, memory: int | None) -> None:
        self.cancel = None
        self.refresh_status(memory)


def memory_in_use(conversation: Any) -> int | None:
    """Bytes the engine holds over all tiers, or None when it cannot say."""
    engine = getattr(conversation, "engine", None)
    report = getattr(engine, "memory_report", None)
    if report is None:
        return None
    try:
        return sum(int(v) for v in report().values())
    except Exception:
        return None


def history_widgets(conversation: Any) -> list:
    """Widgets for the messages a resumed conversation already has.

    Reads the transcript when there is one, because it also knows which replies were cut off.
    """
    transcript = getattr(conversation, "transcript", None)
    if transcript is not None:
        history = transcript.history
        interrupted = set(transcript.interrupted_at)
    else:
        history = [m for m in getattr(conversation, "messages", []) if m.role != "system"]
        interrupted = set()
    out: list = []
    if getattr(transcript, "summary", None):
        out.append(Notice("↻ earlier messages were compacted into a summary"))
    views: dict[tuple[int, str], ToolCallView] = {}
    for i, msg in enumerate(history):
        if msg.role == "user":
            out.append(UserMessage(msg.content))
        elif msg.role == "assistant":
            if msg.thinking:
                out.append(ThinkingBlock(msg.thinking, done=True))
            if msg.content or i in interrupted:
                out.append(AssistantMessage(msg.content, interrupted=i in interrupted))
            for call in msg.tool_calls:
                view = views[(call.index, call.name)] = ToolCallView(call)
                out.append(view)
        elif msg.role == "tool":
            view = views.pop((msg.tool_index or 0, msg.name or ""), None)
            if view is not None:
                view.initial_result = msg.content
    return out
