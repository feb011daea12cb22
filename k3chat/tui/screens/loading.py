"""Model-load progress: stage name and a bar fed by `Engine.load(progress=...)`."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ProgressBar


class LoadingScreen(ModalScreen[None]):
    """Shown while a conversation is built (the engine may load or build weights)."""

    CSS_PATH = Path(__file__).with_suffix(".tcss")

    def __init__(self, title: str = "Loading model") -> None:
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield Label(self.title_text, id="title")
            yield Label("starting…", id="stage")
            yield ProgressBar(total=None, show_eta=False, id="bar")

    def progress(self, stage: str, done: int, total: int) -> None:
        """Engine progress callback, called on the UI thread."""
        self.query_one("#stage", Label).update(stage)
        bar = self.query_one(ProgressBar)
        if total > 0:
            bar.update(total=total, progress=done)
        else:
            bar.update(total=None)
