"""Shared helpers for tools that read and write text files."""

from __future__ import annotations

import difflib
from pathlib import Path

from k3chat.agent.tools.base import ToolError

MAX_TEXT_BYTES = 10 << 20
"""Files larger than this are not read whole (10 MiB)."""


def read_text(path: Path, shown: str) -> str:
    """Read a UTF-8 text file or raise a `ToolError` the model can act on."""
    if not path.exists():
        raise ToolError(f"{shown}: no such file")
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use list_dir")
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise ToolError(f"{shown} is larger than {MAX_TEXT_BYTES >> 20} MiB; use grep")
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"{shown} looks like a binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{shown} is not UTF-8 text ({e.reason} at byte {e.start})") from e


def unified_diff(old: str, new: str, shown: str) -> str:
    """A unified diff with 3 lines of context, `a/<path>` → `b/<path>`."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{shown}" if old else "/dev/null",
        tofile=f"b/{shown}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def diff_counts(diff: str) -> tuple[int, int]:
    """(+added, -removed) line counts of a unified diff."""
    added = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return added, removed
