"""list_dir: the entries of one directory, directories marked with a trailing slash."""

from __future__ import annotations

from typing import Any

from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema

MAX_ENTRIES = 500


class ListDir(Tool):
    name = "list_dir"
    description = (
        "List a directory in the workspace (default: the workspace root). Directories end "
        "with '/', symlinks show their target, files show their size in bytes."
    )
    parameters = object_schema(
        {"path": {"type": "string", "description": "Directory, relative to the workspace."}},
        [],
    )
    kind = "read"
    path_args = ("path",)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.paths["path"]
        shown = ctx.workspace.display(path)
        if not path.exists():
            raise ToolError(f"{shown}: no such directory")
        if not path.is_dir():
            raise ToolError(f"{shown} is a file; use read_file")
        entries = sorted(path.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        lines = []
        for entry in entries[:MAX_ENTRIES]:
            if entry.is_symlink():
                lines.append(f"{entry.name} -> {entry.readlink()}")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name}  {entry.stat().st_size}")
        if len(entries) > MAX_ENTRIES:
            lines.append(f"[{len(entries) - MAX_ENTRIES} more entries not shown]")
        return ToolResult("\n".join(lines) if lines else f"{shown} is empty")
