"""glob: file paths matching a pattern such as `src/**/*.py`."""

from __future__ import annotations

from typing import Any

from k3chat.agent.tools._walk import glob_to_regex, walk
from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema

MAX_MATCHES = 500


class Glob(Tool):
    name = "glob"
    description = (
        "Find files whose path (relative to `path`, default the workspace root) matches a "
        "glob pattern: `*` within a name, `**` across directories, e.g. `**/*.py`. "
        "Skips .git, caches and node_modules."
    )
    parameters = object_schema(
        {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. src/**/*.py"},
            "path": {"type": "string", "description": "Directory to search from."},
        },
        ["pattern"],
    )
    kind = "read"
    path_args = ("path",)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern: str = args["pattern"]
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise ToolError("pattern must be relative and must not contain '..'; set path instead")
        base = ctx.paths["path"]
        if not base.is_dir():
            raise ToolError(f"{ctx.workspace.display(base)}: no such directory")
        regex = glob_to_regex(pattern)
        matches = [rel for _, rel in walk(base, ctx.workspace, dirs=True) if regex.match(rel)]
        if not matches:
            return ToolResult(f"no paths match {pattern!r}")
        shown = sorted(matches)[:MAX_MATCHES]
        if len(matches) > MAX_MATCHES:
            shown.append(f"[{len(matches) - MAX_MATCHES} more matches not shown]")
        return ToolResult("\n".join(shown))
