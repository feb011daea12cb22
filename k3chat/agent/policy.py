"""Approval modes: which kinds of tool run without asking.

| mode       | read | write | shell | outside workspace | .git / secrets write |
|------------|------|-------|-------|-------------------|----------------------|
| read-only  | run  | deny  | deny  | ask               | (writes denied)      |
| ask        | run  | ask   | ask   | ask               | ask                  |
| auto-edit  | run  | run   | ask   | ask               | ask                  |
| yolo       | run  | run   | run   | run               | ask                  |

"plan" is accepted as another name for read-only.
"""

from __future__ import annotations

from typing import Literal

Mode = Literal["read-only", "ask", "auto-edit", "yolo"]
MODES: tuple[str, ...] = ("read-only", "ask", "auto-edit", "yolo")
_ALIASES = {
    "plan": "read-only",
    "readonly": "read-only",
    "auto_edit": "auto-edit",
    "autoedit": "auto-edit",
    "default": "ask",
}


def normalize_mode(mode: str) -> str:
    """Map a user-typed mode to one of `MODES`; raises ValueError naming the valid ones."""
    m = _ALIASES.get(mode.strip().lower(), mode.strip().lower())
    if m not in MODES:
        raise ValueError(f"unknown approval mode {mode!r} (choose from {', '.join(MODES)})")
    return m


def mode_blocks(mode: str, kind: str) -> bool:
    """True when `mode` refuses tools of `kind` outright (no prompt)."""
    return mode == "read-only" and kind in ("write", "shell")


def mode_asks(mode: str, kind: str) -> bool:
    """True when `mode` needs the user's approval for tools of `kind`."""
    if mode == "ask":
        return kind in ("write", "shell")
    if mode == "auto-edit":
        return kind == "shell"
    return False


def always_key(tool: str, reason: str) -> str:
    """Key stored in `always_allowed`: the tool name for mode approvals, `tool:reason`
    for outside/secret approvals, so "always" for edits never covers secret files."""
    return tool if reason in ("write", "shell") else f"{tool}:{reason}"
