"""Pick a session to resume: newest first, filtered as you type.

Dismisses with the chosen session id, or None on Escape. It only reads `SessionInfo` rows,
so it works the same for `--resume` with no value and for `/sessions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from k3chat.session import SessionInfo


def describe(info: SessionInfo) -> str:
    """One row: when, name or title, model, message count, id."""
    when = info.updated[:16].replace("T", " ")
    label = info.name or info.title or "(untitled)"
    return f"{when}  {label[:32]:<32}  {info.model_id[:12]:<12} {info.messages:>4} msgs  {info.id}"


def matches(info: SessionInfo, query: str) -> bool:
    """Case-insensitive substring match over id, name, title, model and cwd."""
    haystack = " ".join([info.id, info.name or "", info.title, info.model_id, info.cwd]).lower()
    return all(word in haystack for word in query.lower().split())


class SessionPicker(ModalScreen[str | None]):
    """A filter box over an option list of sessions."""

    CSS_PATH = Path(__file__).with_suffix(".tcss")
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "move(1)", show=False),
        Binding("up", "move(-1)", show=False),
    ]

    def __init__(self, sessions: Sequence[SessionInfo]) -> None:
        super().__init__()
        self.sessions = list(sessions)
        self.shown: list[SessionInfo] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Label(f"Resume a session ({len(self.sessions)})", id="title")
            yield Input(placeholder="filter by name, title, model, id…", id="filter")
            yield OptionList(id="sessions")
            yield Label("Enter resume · Esc cancel", id="help")

    def on_mount(self) -> None:
        self._refill("")
        self.query_one("#filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._refill(event.value)

    def _refill(self, query: str) -> None:
        self.shown = [s for s in self.sessions if matches(s, query)]
        options = self.query_one(OptionList)
        options.clear_options()
        if self.shown:
            options.add_options(Option(describe(s), id=s.id) for s in self.shown)
            options.highlighted = 0
        else:
            options.add_option(Option("no sessions match", disabled=True))

    def action_move(self, step: int) -> None:
        options = self.query_one(OptionList)
        if self.shown:
            current = options.highlighted or 0
            options.highlighted = max(0, min(len(self.shown) - 1, current + step))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        highlighted = self.query_one(OptionList).highlighted
        if self.shown and highlighted is not None:
            self.dismiss(self.shown[highlighted].id)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
