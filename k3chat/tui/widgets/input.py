"""The prompt: a multi-line TextArea where Enter sends and Ctrl+J / Shift+Enter add a newline.

Terminals differ in what Shift+Enter sends (many send a plain Enter), so Ctrl+J and Alt+Enter
are the newline keys that always work; Shift+Enter is bound too for terminals that report it.
Up on the first line walks back through sent prompts, Down on the last line walks forward,
and Tab completes a slash command name.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter"})


class PromptInput(TextArea):
    """Multi-line prompt with history and slash-command completion."""

    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        max-height: 10;
        border: round $primary 50%;
        padding: 0 1;
    }
    PromptInput:focus {
        border: round $primary;
    }
    """

    @dataclass
    class Submitted(Message):
        """The user pressed Enter on a non-empty prompt."""

        text: str

    def __init__(self, *, commands: tuple[str, ...] = (), id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.commands = commands
        """Slash command names (with the slash) offered by Tab completion."""
        self.sent: list[str] = []
        """Prompts sent, oldest first (TextArea.history is the undo stack)."""
        self._history_pos: int | None = None
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self._submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if event.key == "tab" and self.text.startswith("/"):
            event.stop()
            event.prevent_default()
            self.complete()
            return
        await super()._on_key(event)

    def _submit(self) -> None:
        text = self.text.strip()
        if not text:
            return
        if not self.sent or self.sent[-1] != text:
            self.sent.append(text)
        self._history_pos = None
        self.load_text("")
        self.post_message(self.Submitted(text))

    def matching_commands(self) -> list[str]:
        """Commands that start with what is typed, while only a command name is typed."""
        text = self.text
        if not text.startswith("/") or " " in text or "\n" in text:
            return []
        return [c for c in self.commands if c.startswith(text)]

    def complete(self) -> None:
        """Complete to the longest common prefix of the matches (plus a space when unique)."""
        matches = self.matching_commands()
        if not matches:
            return
        prefix = matches[0]
        for m in matches[1:]:
            while not m.startswith(prefix):
                prefix = prefix[:-1]
        completed = prefix + " " if len(matches) == 1 else prefix
        self.load_text(completed)
        self.move_cursor(self.document.end)

    def action_cursor_up(self, select: bool = False) -> None:
        if select or self.cursor_location[0] > 0 or not self.sent:
            super().action_cursor_up(select)
            return
        if self._history_pos is None:
            self._draft = self.text
            self._history_pos = len(self.sent)
        if self._history_pos > 0:
            self._history_pos -= 1
            self._show(self.sent[self._history_pos])

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if select or self._history_pos is None or self.cursor_location[0] < last_row:
            super().action_cursor_down(select)
            return
        self._history_pos += 1
        if self._history_pos >= len(self.sent):
            self._history_pos = None
            self._show(self._draft)
        else:
            self._show(self.sent[self._history_pos])

    def _show(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)
