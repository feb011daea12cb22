"""Keep tool output small for the model and whole on disk.

A model context is precious and a `pytest -v` log is not: the model gets the head and the
tail (errors tend to be at the end) with a marker in between, and the full text goes to
`<session_dir>/tool-outputs/<n>.txt`, which the marker names so the model can page through
it with read_file or grep.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

OUTPUTS_DIR = "tool-outputs"


def truncate(text: str, max_chars: int, max_lines: int) -> tuple[str, str] | None:
    """Split `text` into (head, tail) that fit the limits, or None if it already fits."""
    lines = text.splitlines(keepends=True)
    if len(text) <= max_chars and len(lines) <= max_lines:
        return None
    head_lines, head_chars = max(1, max_lines * 2 // 3), max_chars * 2 // 3
    tail_lines, tail_chars = max(1, max_lines - head_lines), max_chars - head_chars
    head, used = [], 0
    for line in lines:
        if len(head) >= head_lines or used + len(line) > head_chars:
            break
        head.append(line)
        used += len(line)
    tail, used = [], 0
    for line in reversed(lines[len(head) :]):
        if len(tail) >= tail_lines or used + len(line) > tail_chars:
            break
        tail.append(line)
        used += len(line)
    head_text, tail_text = "".join(head), "".join(reversed(tail))
    # one enormous line (minified JS, a progress bar) must still be cut somewhere
    if not head_text:
        head_text = text[:head_chars]
    if not tail_text and len(text) > len(head_text):
        tail_text = text[-tail_chars:] if tail_chars else ""
    return head_text, tail_text


def save_full(session_dir: Path, text: str) -> Path:
    """Write `text` to the next free `tool-outputs/<n>.txt` (mode 0600) and return its path."""
    out_dir = session_dir / OUTPUTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    taken = [
        int(m.group(1)) for p in out_dir.iterdir() if (m := re.fullmatch(r"(\d+)\.txt", p.name))
    ]
    n = max(taken, default=0) + 1
    while True:
        path = out_dir / f"{n}.txt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            n += 1
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        return path
