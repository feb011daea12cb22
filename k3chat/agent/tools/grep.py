"""grep: lines matching a regular expression, as `file:line: text`."""

from __future__ import annotations

import re
from typing import Any

from k3chat.agent.tools._walk import glob_to_regex, walk
from k3chat.agent.tools.base import Tool, ToolContext, ToolError, ToolResult, object_schema

MAX_FILE_BYTES = 5 << 20
MAX_LINE_CHARS = 300


class Grep(Tool):
    name = "grep"
    description = (
        "Search text files under `path` (a directory or one file; default the workspace "
        "root) for a Python regular expression. Returns `file:line: text` lines. `glob` "
        "limits the files searched (e.g. `*.py`)."
    )
    parameters = object_schema(
        {
            "pattern": {"type": "string", "description": "Python regular expression."},
            "path": {"type": "string", "description": "Directory or file to search."},
            "glob": {"type": "string", "description": "Only files matching this glob."},
            "ignore_case": {"type": "boolean"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 2000},
        },
        ["pattern"],
    )
    kind = "read"
    path_args = ("path",)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as e:
            raise ToolError(f"invalid regular expression: {e}") from e
        base = ctx.paths["path"]
        if not base.exists():
            raise ToolError(f"{ctx.workspace.display(base)}: no such file or directory")
        limit = args.get("max_results", 200)
        include = glob_to_regex(args["glob"]) if args.get("glob") else None
        if base.is_file():
            files = [(base, base.name)]
        else:
            files = walk(base, ctx.workspace)
        hits: list[str] = []
        more = 0
        for path, rel in files:
            if include and not (include.match(rel) or include.match(path.name)):
                continue
            for lineno, line in _lines(path):
                if regex.search(line):
                    if len(hits) < limit:
                        text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"
                        hits.append(f"{ctx.workspace.display(path)}:{lineno}: {text}")
                    else:
                        more += 1
        if not hits:
            return ToolResult(f"no matches for {args['pattern']!r}")
        if more:
            hits.append(f"[{more} more matches not shown; narrow the pattern or path]")
        return ToolResult("\n".join(hits))


def _lines(path):
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if b"\0" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    return enumerate(text.splitlines(), start=1)
