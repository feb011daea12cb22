"""Where the agent may act: the workspace roots and the files it must not touch.

Every path a tool receives goes through `Workspace.resolve`, which follows symlinks
(`os.path.realpath`), so `../..`, absolute paths and a link pointing out of the tree all
land on their real target before the inside/outside test. Paths outside every root, and
writes to `.git/` internals or secret-looking files, are not refused here: the executor
turns them into an approval request ("outside" / "secret").
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SECRET_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    "credentials",
    "credentials.json",
    "secrets.*",
)
"""File names (fnmatch, case-insensitive) that usually hold credentials."""

SECRET_DIRS: tuple[str, ...] = (".ssh", ".gnupg", ".aws")
"""A path with one of these components is treated as secret."""


@dataclass(frozen=True)
class ResolvedPath:
    """A user/model-supplied path after symlink resolution."""

    path: Path
    """Absolute, symlinks resolved."""
    inside: bool
    """True when under one of the workspace roots."""
    protected: str | None
    """Why writing here needs approval ("git internals", "secret file"), else None."""


class Workspace:
    """The directories the agent works in: the cwd first, then any `--add-dir`."""

    def __init__(self, roots: Iterable[Path | str]) -> None:
        resolved = [Path(os.path.realpath(os.path.expanduser(str(r)))) for r in roots]
        if not resolved:
            raise ValueError("a workspace needs at least one root directory")
        self.roots: list[Path] = list(dict.fromkeys(resolved))

    @property
    def cwd(self) -> Path:
        """Relative paths and shell commands start here (the first root)."""
        return self.roots[0]

    def resolve(self, path: str | Path) -> ResolvedPath:
        """Resolve `path` (relative to the first root, `~` expanded) following symlinks."""
        p = Path(os.path.expanduser(str(path)))
        if not p.is_absolute():
            p = self.cwd / p
        real = Path(os.path.realpath(p))
        return ResolvedPath(real, self.contains(real), self._protection(real))

    def contains(self, real: Path) -> bool:
        """True if the already-resolved path `real` is a root or below one."""
        return any(real == r or real.is_relative_to(r) for r in self.roots)

    def display(self, real: Path) -> str:
        """A short name for messages: relative to the first root that holds it."""
        for r in self.roots:
            if real == r:
                return "." if r == self.cwd else str(r)
            if real.is_relative_to(r):
                rel = str(real.relative_to(r))
                return rel if r == self.cwd else str(r / rel)
        return str(real)

    def _protection(self, real: Path) -> str | None:
        # judge only the part below the root, so a root that itself sits under ~/.aws still works
        root = next((r for r in self.roots if real.is_relative_to(r)), None)
        parts = real.relative_to(root).parts if root else real.parts
        if ".git" in parts[:-1] or (parts and parts[-1] == ".git"):
            return "git internals"
        if any(d in parts for d in SECRET_DIRS):
            return "secret file"
        name = real.name.lower()
        if any(fnmatch.fnmatch(name, pat) for pat in SECRET_PATTERNS):
            return "secret file"
        return None
