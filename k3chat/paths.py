"""Where k3chat keeps things: XDG base directories with one override, `K3CHAT_HOME`.

With `K3CHAT_HOME` set everything lives under it (config.toml, sessions/); otherwise config in
`$XDG_CONFIG_HOME/k3chat` and data in `$XDG_DATA_HOME/k3chat` (the XDG spec's defaults apply).
"""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    # the XDG spec says relative values are invalid and must be ignored
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def home() -> Path | None:
    """The `K3CHAT_HOME` override, or None."""
    value = os.environ.get("K3CHAT_HOME")
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    h = home()
    return h if h else _xdg("XDG_CONFIG_HOME", ".config") / "k3chat"


def data_dir() -> Path:
    h = home()
    return h if h else _xdg("XDG_DATA_HOME", ".local/share") / "k3chat"


def config_file() -> Path:
    return config_dir() / "config.toml"


def sessions_dir(flag: str | None = None, cwd: Path | None = None) -> Path:
    """Resolve the sessions directory.

    Precedence: `--sessions-dir` > `K3CHAT_SESSIONS_DIR` > `./sessions` when it exists and holds
    a session-format README (a checkout of this repo) or session dirs > the data dir.
    """
    if flag:
        return Path(flag).expanduser()
    env = os.environ.get("K3CHAT_SESSIONS_DIR")
    if env:
        return Path(env).expanduser()
    local = (cwd or Path.cwd()) / "sessions"
    if local.is_dir():
        return local
    return data_dir() / "sessions"
