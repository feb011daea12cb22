"""Small helpers shared by the agent tests (imported as a top-level module by pytest)."""

from __future__ import annotations

from k3chat.agent import ApprovalDecision, ApprovalRequest
from k3chat_model.events import ToolCall


class RecordingApprover:
    """Answers from a queue of decisions (default: deny) and records every request."""

    def __init__(self, *answers: ApprovalDecision | bool) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []

    def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(req)
        answer = self.answers.pop(0) if self.answers else False
        return ApprovalDecision(answer) if isinstance(answer, bool) else answer


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)
