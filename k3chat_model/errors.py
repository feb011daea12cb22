"""Typed engine errors: each carries a one-line `msg` and an optional `hint` for the user.

Library code raises these (chained with ``raise ... from e``); only ``k3chat.cli`` turns them
into ``k3chat: error: <msg>`` and an exit code.
"""

from __future__ import annotations


class K3Error(Exception):
    """Base class for every error the engine reports to a user."""

    def __init__(self, msg: str, hint: str | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.hint = hint

    def __str__(self) -> str:
        return self.msg if not self.hint else f"{self.msg} ({self.hint})"


class ConfigError(K3Error):
    """config.json is missing, malformed or inconsistent."""


class UnsupportedArchitecture(ConfigError):
    """config.json names a model_type this engine does not implement."""


class CheckpointError(K3Error):
    """A checkpoint file is missing, truncated, or holds a tensor of the wrong name/shape."""


class TokenizerError(K3Error):
    """Tokenizer files are missing or unreadable."""


class ModelNotFound(K3Error):
    """A model name/path given by the user does not resolve to a checkpoint."""


class StateMismatch(K3Error):
    """An engine-state snapshot was made by another model or config."""


class DefaultModelError(K3Error):
    """The default model (k3-smol) could not be obtained or built."""
