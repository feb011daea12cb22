"""The TUI's `Approver`: the agent's worker thread asks, the modal answers.

`ToolExecutor.run` calls `decide` on the engine worker thread. It pushes an `ApprovalScreen`
on the UI thread and blocks on a `threading.Event` until the modal is dismissed, or until the
turn is cancelled (Ctrl-C), which counts as "no".
"""

from __future__ import annotations

import threading

from textual.app import App

from k3chat.agent.approval import ApprovalDecision, ApprovalRequest
from k3chat.tui.screens.approval import ApprovalScreen

POLL_S = 0.1
"""How often a waiting worker checks whether its turn was cancelled."""


class TuiApprover:
    """Implements `k3chat.agent.Approver` with a modal screen."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.cancel: threading.Event | None = None
        """The running turn's cancel flag; set by the chat screen when a turn starts."""

    def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        if threading.get_ident() == self.app._thread_id:
            raise RuntimeError("TuiApprover.decide must be called from a worker thread")
        answered = threading.Event()
        result: list[ApprovalDecision] = []

        def on_dismiss(decision: ApprovalDecision | None) -> None:
            result.append(decision or ApprovalDecision.no())
            answered.set()

        screen = ApprovalScreen(req)
        self.app.call_from_thread(self.app.push_screen, screen, on_dismiss)
        while not answered.wait(POLL_S):
            if self.cancel is not None and self.cancel.is_set():
                self.app.call_from_thread(self._close, screen)
                return ApprovalDecision.no("cancelled by the user")
        return result[0]

    def _close(self, screen: ApprovalScreen) -> None:
        if screen.is_current:
            screen.dismiss(None)
