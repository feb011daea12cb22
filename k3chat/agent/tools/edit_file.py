"""edit_file: replace one exact string in a file; ambiguous matches are refused."""

from __future__ import annotations

from typing import Any

from k3chat.agent.tools._text import diff_counts, read_text, unified_diff
from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema


class EditFile(Tool):
    name = "edit_file"
    description = (
        "Replace an exact string in a text file. old_string must match the file exactly "
        "(whitespace included) and only once, unless replace_all is true; include enough "
        "surrounding lines to make it unique. Returns a diff."
    )
    parameters = object_schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "old_string": {"type": "string", "description": "Exact text to replace."},
            "new_string": {"type": "string", "description": "Replacement text."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
        },
        ["path", "old_string", "new_string"],
    )
    kind = "write"
    path_args = ("path",)

    def _apply(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str, int]:
        path = ctx.paths["path"]
        shown = ctx.workspace.display(path)
        old_text = read_text(path, shown)
        old, new = args["old_string"], args["new_string"]
        if not old:
            raise ToolError("old_string is empty; use write_file to create a file")
        if old == new:
            raise ToolError("old_string and new_string are identical; nothing to change")
        count = old_text.count(old)
        if count == 0:
            raise ToolError(
                f"old_string not found in {shown}; read the file and copy the text exactly"
            )
        if count > 1 and not args.get("replace_all"):
            raise ToolError(
                f"old_string matches {count} places in {shown}; add surrounding lines to "
                "make it unique, or set replace_all"
            )
        return old_text, old_text.replace(old, new), count

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        old_text, new_text, _ = self._apply(args, ctx)
        return unified_diff(old_text, new_text, ctx.workspace.display(ctx.paths["path"]))

    def summary(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return f"edit_file {ctx.workspace.display(ctx.paths['path'])}"

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.paths["path"]
        old_text, new_text, count = self._apply(args, ctx)
        diff = unified_diff(old_text, new_text, ctx.workspace.display(path))
        path.write_text(new_text, encoding="utf-8")
        added, removed = diff_counts(diff)
        times = f", {count} replacements" if count > 1 else ""
        return ToolResult(
            f"edited {ctx.workspace.display(path)} (+{added} -{removed}{times})\n{diff}"
        )
