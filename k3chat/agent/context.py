"""`AgentContext`: everything `Conversation` needs to run an agent turn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k3chat.agent.approval import Approver
from k3chat.agent.executor import ToolExecutor
from k3chat.agent.registry import ToolRegistry, default_registry
from k3chat.agent.workspace import Workspace


@dataclass
class AgentContext:
    """The tools declared to the model and the executor that runs their calls."""

    registry: ToolRegistry
    executor: ToolExecutor

    def declarations(self) -> list[dict[str, Any]]:
        return self.registry.declarations()

    def system_hint(self) -> str:
        """A short paragraph for the system prompt: where the agent is and how it may act."""
        roots = ", ".join(str(r) for r in self.executor.workspace.roots)
        return (
            f"You are a coding agent working in {self.executor.workspace.cwd}. Workspace roots: "
            f"{roots}. Use the tools to read, search and edit files and to run commands; paths "
            f"are relative to the first root. Approval mode: {self.executor.mode}."
        )


def make_agent(
    roots: list[Path],
    *,
    mode: str = "ask",
    approver: Approver | None = None,
    session: Any = None,
    session_dir: Path | None = None,
    always_allowed: set[str] | None = None,
    tools: list[str] | None = None,
) -> AgentContext:
    """Build the default agent (all built-in tools); the CLI's one call.

    With `session` (a `k3chat.session.Session`), full tool outputs go to its directory and
    "always" answers are stored in its meta.json (`always_allowed`) and restored on resume.
    `tools` limits the agent to the named tools (ValueError for an unknown name).
    """
    on_always = None
    if session is not None:
        session_dir = session_dir or session.dir
        if always_allowed is None:
            always_allowed = set(session.meta.get("always_allowed") or [])

        def on_always(allowed: set[str]) -> None:
            session.update_meta(always_allowed=sorted(allowed))

    registry = default_registry()
    if tools is not None:
        unknown = sorted(set(tools) - set(registry.names()))
        if unknown:
            raise ValueError(f"unknown tools {unknown} (available: {', '.join(registry.names())})")
        registry = ToolRegistry(t for t in registry if t.name in tools)
    executor = ToolExecutor(
        registry,
        Workspace(roots),
        mode=mode,
        approver=approver,
        session_dir=session_dir,
        always_allowed=always_allowed,
        on_always=on_always,
    )
    return AgentContext(registry, executor)
