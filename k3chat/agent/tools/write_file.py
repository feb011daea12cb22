"""write_file: create or overwrite a text file (parent directories are created)."""

from __future__ import annotations

from typing import Any

from k3chat.agent.tools._text import diff_counts, read_text, unified_diff
from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema


class WriteFile(Tool):
    name = "write_file"
    description = (
        "Create a text file or replace its whole content. Prefer edit_file for changes "
        "to an existing file. Returns a diff of what changed."
    )
    parameters = object_schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        ["path", "content"],
    )
    kind = "write"
    path_args = ("path",)

    def _old(self, ctx: ToolContext) -> str:
        path = ctx.paths["path"]
        if path.is_dir():
            raise ToolError(f"{ctx.workspace.display(path)} is a directory")
        return read_text(path, ctx.workspace.display(path)) if path.exists() else ""

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return unified_diff(
            self._old(ctx), args["content"], ctx.workspace.display(ctx.paths["path"])
        )

    def summary(self, args: dict[str, Any], ctx: ToolContext) -> str:
        path = ctx.paths["path"]
        verb = "overwrite" if path.exists() else "create"
        return f"write_file {verb} {ctx.workspace.display(path)} ({len(args['content'])} chars)"

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.paths["path"]
        shown = ctx.workspace.display(path)
        existed = path.exists()
        diff = self.preview(args, ctx)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["content"], encoding="utf-8")
        added, removed = diff_counts(diff)
        head = f"{'updated' if existed else 'created'} {shown} (+{added} -{removed})"
        return ToolResult(head + ("\n" + diff if diff else "\n(no change)"))
