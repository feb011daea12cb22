"""Approvers that need no terminal: a fixed answer and a callback.

The line-mode prompt and the TUI modal live with their views (`k3chat/line.py`,
`k3chat/tui/`) and implement the same `Approver` protocol.
"""

from __future__ import annotations

from collections.abc import Callable

from k3chat.agent.approval import ApprovalDecision, ApprovalRequest


class AutoApprover:
    """Answers every request the same way; one-shot runs use `AutoApprover(False)`.

    Nobody is there to ask in a pipe, so the safe default is no; `--approval-mode`
    decides what runs without asking (the executor's mode), not this object.
    """

    def __init__(self, allow: bool = False) -> None:
        self.allow = allow
        self.requests: list[ApprovalRequest] = []
        """Every request seen, so a one-shot run can report what it refused."""

    def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(req)
        if self.allow:
            return ApprovalDecision.yes()
        return ApprovalDecision.no(
            "no interactive user to approve this; rerun with a wider --approval-mode"
        )


class CallbackApprover:
    """Adapts a plain function `(ApprovalRequest) -> ApprovalDecision | bool`."""

    def __init__(self, fn: Callable[[ApprovalRequest], ApprovalDecision | bool]) -> None:
        self.fn = fn

    def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        answer = self.fn(req)
        if isinstance(answer, bool):
            return ApprovalDecision(answer)
        return answer
