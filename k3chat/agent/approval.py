"""What the executor asks a human, and what the human answers.

The executor never talks to a terminal: it hands an `ApprovalRequest` to an `Approver`
(TUI modal, line-mode prompt, one-shot policy, or a test callback) and acts on the
`ApprovalDecision`. The four choices users get everywhere are yes / no / always for this
session / no with feedback; `always` and `feedback` carry the last two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

ApprovalKind = Literal["write", "shell", "outside", "secret"]


@dataclass
class ApprovalRequest:
    """One question to the user about one tool call."""

    tool: str
    arguments: dict[str, Any]
    kind: ApprovalKind
    """Why we ask: "write" / "shell" (mode policy), "outside" (a path outside the workspace
    roots), "secret" (a write to .git internals or a secret-looking file)."""
    summary: str
    """One line for a prompt or a modal title, e.g. `edit_file src/app.py (+2 -1)`."""
    diff: str | None = None
    """Unified diff of a proposed write, or the command line of a shell call."""
    reasons: list[str] = field(default_factory=list)
    """Every reason that applies, most serious first (kind is reasons[0])."""


@dataclass
class ApprovalDecision:
    """The user's answer. `always` remembers the approval for the rest of the session."""

    allow: bool
    always: bool = False
    feedback: str | None = None
    """Text for the model when the user says no with feedback."""

    @classmethod
    def yes(cls) -> ApprovalDecision:
        return cls(True)

    @classmethod
    def always_allow(cls) -> ApprovalDecision:
        return cls(True, always=True)

    @classmethod
    def no(cls, feedback: str | None = None) -> ApprovalDecision:
        return cls(False, feedback=feedback or None)


@runtime_checkable
class Approver(Protocol):
    """Anything that can answer an approval request (may block on user input)."""

    def decide(self, req: ApprovalRequest) -> ApprovalDecision: ...
