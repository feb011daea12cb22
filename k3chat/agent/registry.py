"""The set of tools one agent session offers the model."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from k3chat.agent.tools import Tool, discover

_KIND_ORDER = {"read": 0, "write": 1, "shell": 2}


class ToolRegistry:
    """Tools by name, declared in a stable order (reads, writes, shell; then by name).

    A stable order keeps the rendered tool-declaration prefix identical across turns, so
    the engine's prompt cache keeps hitting.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if not tool.name:
            raise ValueError(f"{type(tool).__name__} has no name")
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        if tool.kind not in _KIND_ORDER:
            raise ValueError(f"tool {tool.name!r} has unknown kind {tool.kind!r}")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return [t.name for t in self]

    def __iter__(self) -> Iterator[Tool]:
        return iter(sorted(self._tools.values(), key=lambda t: (_KIND_ORDER[t.kind], t.name)))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def declarations(self) -> list[dict[str, Any]]:
        """JSON-schema tool dicts for `Engine.generate(tools=...)`."""
        return [t.declaration() for t in self]


def default_registry() -> ToolRegistry:
    """read_file, list_dir, glob, grep, write_file, edit_file, run_shell."""
    return ToolRegistry(discover())
