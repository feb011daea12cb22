"""Typed application errors: each carries a one-line `msg` and an optional `hint`.

Library code raises these; only `k3chat.cli` turns them into `k3chat: error: <msg>` and an
exit code (UsageError → 2, everything else → 1).
"""

from __future__ import annotations

from k3chat_model.errors import K3Error


class AppError(K3Error):
    """Base class for every error the application reports to a user (same `msg`/`hint` shape
    as the engine's errors, so the CLI reports both one way)."""

    exit_code = 1


class SessionNotFound(AppError):
    """A session reference (id, id prefix or name) matches no session, or several."""


class SessionCorrupt(AppError):
    """A session directory cannot be read (meta.json unreadable, events.jsonl missing)."""


class SessionWriteError(AppError):
    """The session log or metadata could not be written (disk full, permissions, I/O error).

    Everything written before stays readable; the unsaved event is reported, never dropped silently."""


class UsageError(AppError):
    """The command line or the input is unusable as given (exit code 2)."""

    exit_code = 2


class InputError(AppError):
    """Piped or attached input cannot be used (binary data, unreadable file)."""


class ContextFull(AppError):
    """A message cannot fit in the model's context even after compaction."""
