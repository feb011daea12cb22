"""A one-line note in the transcript: compaction, warnings, command output."""

from __future__ import annotations

from textual.widgets import Static


class Notice(Static):
    """Muted line; `level` "warning" or "error" switches the colour through a CSS class."""

    DEFAULT_CSS = """
    Notice {
        margin: 1 4 0 0;
        padding: 0 1;
        color: $text-muted;
        height: auto;
    }
    Notice.-warning { color: $warning; }
    Notice.-error { color: $error; }
    """

    def __init__(self, text: str, *, level: str = "info") -> None:
        super().__init__(text, markup=False, classes=f"-{level}")
