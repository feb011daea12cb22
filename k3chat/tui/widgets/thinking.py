"""The model's reasoning: open while it streams, collapsed once the answer starts."""

from __future__ import annotations

from textual.widgets import Collapsible, Static


class ThinkingBlock(Collapsible):
    """Streamed thinking text under a collapsible title."""

    DEFAULT_CSS = """
    ThinkingBlock {
        margin: 1 4 0 0;
        padding: 0;
        border: none;
        border-left: thick $panel-lighten-2;
        background: $surface;
    }
    ThinkingBlock > Contents {
        padding: 0 1;
    }
    ThinkingBlock .thinking-text {
        color: $text-muted;
        text-style: italic;
    }
    """

    def __init__(self, text: str = "", *, done: bool = False) -> None:
        self._text = text
        self._body = Static(text, classes="thinking-text", markup=False)
        super().__init__(self._body, title=self._title_for(done), collapsed=done)

    @property
    def text(self) -> str:
        return self._text

    def append(self, text: str) -> None:
        self._text += text
        self._body.update(self._text)

    def finish(self) -> None:
        """Collapse and retitle: the reasoning is done."""
        self.title = self._title_for(True)
        self.collapsed = True

    def _title_for(self, done: bool) -> str:
        return f"Thought ({len(self._text.split())} words)" if done else "Thinking…"
