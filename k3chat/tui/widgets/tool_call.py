"""One tool call as it happens: the call line first, the result once the tool returns."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from k3chat_model.events import ToolCall

RESULT_LINES = 12
"""Result lines shown inline; the rest is summarised as a count."""


def describe_call(call: ToolCall) -> str:
    """`name(arg=value, ...)` on one line, values JSON-encoded and clipped."""
    args = ", ".join(
        f"{k}={_clip(json.dumps(v, ensure_ascii=False), 60)}" for k, v in call.arguments.items()
    )
    return f"{call.name}({args})"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ToolCallView(Vertical):
    """A tool call with its state as CSS class: -pending, -running, -ok, -error, -denied."""

    DEFAULT_CSS = """
    ToolCallView {
        height: auto;
        margin: 1 4 0 2;
        padding: 0 1;
        border-left: thick $accent;
        background: $surface;
    }
    ToolCallView > .call { text-style: bold; }
    ToolCallView > .result { color: $text-muted; height: auto; }
    ToolCallView.-ok { border-left: thick $success; }
    ToolCallView.-error { border-left: thick $error; }
    ToolCallView.-denied { border-left: thick $warning; }
    """

    def __init__(self, call: ToolCall) -> None:
        super().__init__(classes="-pending")
        self.call = call
        """The call this view shows; the router matches later events by its index and name."""
        self.state = "pending"
        self.initial_result: str | None = None
        """A result known before mounting (a replayed history); shown on mount."""

    def compose(self) -> ComposeResult:
        icon = "✗" if self.call.error else "⚙"
        line = f"{icon} {describe_call(self.call)}"
        if self.call.error:
            line += f"  — malformed: {self.call.error}"
        yield Static(line, classes="call", markup=False)
        yield Static("", classes="result", markup=False)

    def on_mount(self) -> None:
        if self.initial_result is not None:
            self.finished(self.initial_result, ok=True, denied=False)

    def set_state(self, state: str) -> None:
        self.remove_class(f"-{self.state}")
        self.state = state
        self.add_class(f"-{state}")

    def started(self) -> None:
        self.set_state("running")
        self.query_one(".result", Static).update("running…")

    def finished(self, output: str, *, ok: bool, denied: bool) -> None:
        self.set_state("denied" if denied else "ok" if ok else "error")
        lines = output.splitlines()
        shown = "\n".join(lines[:RESULT_LINES])
        if len(lines) > RESULT_LINES:
            shown += f"\n… {len(lines) - RESULT_LINES} more lines"
        prefix = "denied: " if denied else ""
        self.query_one(".result", Static).update(prefix + (shown or "(no output)"))
