"""A confined directory walk shared by glob and grep.

It does not descend into symlinked directories, skips tool/VCS caches, and drops any file
whose real path leaves both the workspace and the searched directory, so a symlink cannot
smuggle outside content into results.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from k3chat.agent.workspace import Workspace

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)


def walk(base: Path, ws: Workspace, *, dirs: bool = False) -> Iterator[tuple[Path, str]]:
    """Yield (path, posix path relative to `base`) for files (and dirs if asked), sorted."""
    for top, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        here = Path(top)
        names = sorted(filenames) + (dirnames if dirs else [])
        for name in names:
            path = here / name
            real = Path(os.path.realpath(path))
            if not (ws.contains(real) or real.is_relative_to(base)):
                continue
            yield path, path.relative_to(base).as_posix()


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob with `**` (any depth), `*`, `?` and `[...]` over posix paths."""
    i, out = 0, []
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            j = pattern.index("]", i + 1)
            body = pattern[i + 1 : j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")
