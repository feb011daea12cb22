"""The approval modal: one tool call, its diff or command, and four answers.

Answers are yes (y), no (n), always for this session (a) and no with feedback (f, then type
and press Enter). Escape means no. The screen dismisses with an `ApprovalDecision`.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from k3chat.agent.approval import ApprovalDecision, ApprovalRequest

KIND_TITLES = {
    "write": "Allow this change?",
    "shell": "Run this command?",
    "outside": "Access a path outside the workspace?",
    "secret": "Touch a protected file?",
}


def styled_diff(diff: str) -> Content:
    """A unified diff coloured through theme variables (added, removed, hunk headers)."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "$text-success"
        elif line.startswith("-"):
            style = "$text-error"
        elif line.startswith("@@"):
            style = "$text-accent"
        else:
            style = ""
        lines.append(Content.styled(line, style) if style else Content(line))
    return Content("\n").join(lines)


class ApprovalScreen(ModalScreen[ApprovalDecision]):
    """Asks about one `ApprovalRequest`."""

    CSS_PATH = Path(__file__).with_suffix(".tcss")
    BINDINGS = [
        Binding("y", "answer('yes')", "Yes"),
        Binding("n,escape", "answer('no')", "No"),
        Binding("a", "answer('always')", "Always"),
        Binding("f", "feedback", "No, with feedback"),
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        req = self.request
        with Vertical(id="dialog"):
            yield Label(KIND_TITLES.get(req.kind, "Allow this tool call?"), id="title")
            yield Static(req.summary, id="summary", markup=False)
            for reason in req.reasons[1:]:
                yield Static(f"also: {reason}", classes="reason", markup=False)
            if req.diff:
                with VerticalScroll(id="detail"):
                    yield Static(
                        styled_diff(req.diff) if req.kind != "shell" else req.diff, markup=False
                    )
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", id="yes", variant="success")
                yield Button("No (n)", id="no", variant="error")
                yield Button("Always this session (a)", id="always", variant="primary")
                yield Button("No, with feedback (f)", id="feedback")
            yield Input(placeholder="Tell the model what to do instead, then Enter", id="reason")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "feedback":
            self.action_feedback()
        else:
            self.action_answer(event.button.id or "no")

    def action_answer(self, choice: str) -> None:
        if choice == "yes":
            self.dismiss(ApprovalDecision.yes())
        elif choice == "always":
            self.dismiss(ApprovalDecision.always_allow())
        else:
            self.dismiss(ApprovalDecision.no())

    def action_feedback(self) -> None:
        box = self.query_one("#reason", Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(ApprovalDecision.no(event.value.strip()))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # while typing feedback, letters are text, not answers
        if action in ("answer", "feedback") and self.query_one("#reason", Input).has_focus:
            return parameters == ("no",) or None
        return True
