"""The `Tool` base class: what every tool module subclasses.

A tool is a name, a description for the model, a JSON-schema for its arguments, a `kind`
(read | write | shell) that the approval policy keys on, and the argument names that are
paths (`path_args`), which the executor resolves and confines before the tool runs. Adding a
tool is one module in this package with one `Tool` subclass; the registry finds it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from k3chat.agent.workspace import Workspace

ToolKind = Literal["read", "write", "shell"]


class ToolError(Exception):
    """A failure the model should read and can act on (file not found, no match, …)."""


@dataclass
class ToolResult:
    """What one tool run produced, before truncation for the model."""

    output: str
    ok: bool = True


@dataclass
class ToolContext:
    """What a tool may use while it runs."""

    workspace: Workspace
    paths: dict[str, Path] = field(default_factory=dict)
    """The `path_args` resolved by the executor (absolute, symlinks followed, confined)."""
    cancel: threading.Event | None = None
    """Set when the user interrupts; long tools (run_shell) stop early."""
    shell_output_cap: int = 1 << 20
    """Bytes of shell output kept at most; the rest is counted and dropped."""
    shell_default_timeout: float = 120.0


class Tool:
    """Base class; subclasses set the class attributes and implement `run`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    kind: ClassVar[ToolKind] = "read"
    path_args: ClassVar[tuple[str, ...]] = ()
    """Arguments holding paths; a missing optional one defaults to "." (the cwd)."""

    def declaration(self) -> dict[str, Any]:
        """The JSON-schema tool dict `Engine.generate(tools=...)` takes."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """What the approval prompt shows (a diff, a command); may raise `ToolError`.

        Runs before approval so a call that would fail anyway (no match, ambiguous match)
        is answered with an error instead of bothering the user.
        """
        return None

    def summary(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """One line naming the call for prompts and logs."""
        shown = ", ".join(f"{k}={_short(v)}" for k, v in args.items())
        return f"{self.name}({shown})"

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise NotImplementedError


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def object_schema(properties: dict[str, dict], required: list[str]) -> dict[str, Any]:
    """A strict object schema (unknown arguments are an error the model sees)."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
