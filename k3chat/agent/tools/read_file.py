"""read_file: numbered lines of a text file, optionally a line range."""

from __future__ import annotations

from typing import Any

from k3chat.agent.tools._text import read_text
from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema

MAX_LINES = 400
"""Lines returned per call; the model pages with start_line."""


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file in the workspace. Returns lines prefixed with their line "
        f"numbers. At most {MAX_LINES} lines per call; use start_line/end_line (1-based, "
        "inclusive) to read a range."
    )
    parameters = object_schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line, inclusive."},
        },
        ["path"],
    )
    kind = "read"
    path_args = ("path",)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.paths["path"]
        shown = ctx.workspace.display(path)
        lines = read_text(path, shown).splitlines()
        total = len(lines)
        start = args.get("start_line", 1)
        end = args.get("end_line", total)
        if end < start:
            raise ToolError(f"end_line ({end}) is before start_line ({start})")
        if total == 0:
            return ToolResult(f"{shown} is empty")
        if start > total:
            raise ToolError(f"start_line {start} is past the end of {shown} ({total} lines)")
        end = min(end, total, start + MAX_LINES - 1)
        width = len(str(end))
        body = "\n".join(f"{i:>{width}}\t{lines[i - 1]}" for i in range(start, end + 1))
        if end < total:
            body += (
                f"\n[{shown}: lines {start}-{end} of {total}; pass start_line={end + 1} for more]"
            )
        return ToolResult(body)
