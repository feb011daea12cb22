"""Chat messages: the user's prompt and the assistant's streamed Markdown reply.

Re-parsing Markdown on every token starves key handling (Textualize/textual#6518), so the reply
buffers deltas and flushes them at most `FLUSH_INTERVAL` apart; `finish()` flushes the rest.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Markdown, Static

FLUSH_INTERVAL = 1 / 15
"""Seconds between Markdown re-renders while streaming."""


class UserMessage(Markdown):
    """What the user sent, shown as Markdown so pasted code keeps its fences."""

    DEFAULT_CSS = """
    UserMessage {
        margin: 1 0 0 8;
        padding: 0 1;
        background: $boost;
        border-left: thick $secondary;
    }
    UserMessage > MarkdownBlock:last-child {
        margin-bottom: 0;
    }
    """


class AssistantMessage(Vertical):
    """One streamed reply: Markdown body plus a one-line footer (stats, interrupted mark)."""

    DEFAULT_CSS = """
    AssistantMessage {
        height: auto;
        margin: 1 4 0 0;
        border-left: thick $primary;
        padding: 0 1;
    }
    AssistantMessage > Markdown {
        margin: 0;
        padding: 0;
    }
    AssistantMessage > Markdown > MarkdownBlock:last-child {
        margin-bottom: 0;
    }
    AssistantMessage > .footer {
        color: $text-muted;
        height: auto;
        display: none;
    }
    AssistantMessage.-interrupted {
        border-left: thick $warning;
    }
    AssistantMessage.-interrupted > .footer {
        color: $warning;
    }
    """

    def __init__(self, text: str = "", *, interrupted: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Markdown(text)
        self._text = text
        self._pending = ""
        self._timer: Timer | None = None
        self.interrupted = interrupted
        """True once the reply was cut off (Ctrl-C now, or logged so in a resumed session)."""

    def compose(self) -> ComposeResult:
        yield self._body
        yield Static("", classes="footer")

    def on_mount(self) -> None:
        if self.interrupted:
            self.finish(interrupted=True)

    @property
    def text(self) -> str:
        """All text received so far, flushed or not."""
        return self._text

    @property
    def shown_text(self) -> str:
        """The Markdown source rendered so far (lags `text` by at most one flush)."""
        return self._body.source

    def append(self, text: str) -> None:
        """Queue a delta; it shows within `FLUSH_INTERVAL`."""
        self._text += text
        self._pending += text
        if self._timer is None:
            self._timer = self.set_timer(FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        """Render whatever is queued now."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._pending:
            chunk, self._pending = self._pending, ""
            self._body.append(chunk)

    def finish(self, *, interrupted: bool = False, footer: str = "") -> None:
        """Close the stream: flush, and mark the reply interrupted when it was cut off."""
        self.flush()
        self.interrupted = interrupted
        self.set_class(interrupted, "-interrupted")
        parts = (["⏹ interrupted"] if interrupted else []) + ([footer] if footer else [])
        footer_line = self.query_one(".footer", Static)
        footer_line.update(" · ".join(parts))
        footer_line.display = bool(parts)
