"""User settings: defaults < config.toml < `K3CHAT_*` environment < command-line flags.

The file is `$K3CHAT_HOME/config.toml` or `$XDG_CONFIG_HOME/k3chat/config.toml`; its keys are the
long flag names with `_` for `-` (`max_tokens = 2048`, `approval_mode = "ask"`). Each key can also
come from the environment as `K3CHAT_<KEY>` (`K3CHAT_MAX_TOKENS=2048`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from k3chat import paths
from k3chat.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULTS: dict[str, Any] = {
    "model": "k3-smol",
    "quantize": None,
    "device_map": None,
    "max_memory": None,
    "offload_dir": None,
    "temperature": None,
    "top_p": None,
    "top_k": None,
    "max_tokens": None,
    "seed": None,
    "system": None,
    "think": False,
    "approval_mode": "ask",
    "agent": None,
    "sessions_dir": None,
    "output_format": "text",
    "theme": None,
}
_TYPES: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "max_tokens": int,
    "seed": int,
    "think": bool,
    "agent": bool,
}


def _coerce(key: str, value: Any, source: str) -> Any:
    t = _TYPES.get(key)
    if (
        t is None
        or value is None
        or isinstance(value, t)
        and not (t is int and isinstance(value, bool))
    ):
        return value
    try:
        if t is bool:
            if isinstance(value, str):
                v = value.strip().lower()
                if v in ("1", "true", "yes", "on"):
                    return True
                if v in ("0", "false", "no", "off", ""):
                    return False
                raise ValueError(value)
            return bool(value)
        return t(value)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{source}: {key} must be {t.__name__}, got {value!r}") from e


def load_file(path: Path | None = None) -> dict[str, Any]:
    path = path or paths.config_file()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read config file {path}: {e}") from e
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise UsageError(
            f"{path}: unknown setting(s) {', '.join(unknown)}", hint=f"known: {', '.join(DEFAULTS)}"
        )
    return {k: _coerce(k, v, str(path)) for k, v in data.items()}


def load_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    out = {}
    for key in DEFAULTS:
        name = "K3CHAT_" + key.upper()
        if name in env:
            out[key] = _coerce(key, env[name], name)
    return out


def resolve(flags: dict[str, Any]) -> dict[str, Any]:
    """Merge every source; a flag left at None does not override."""
    merged = dict(DEFAULTS)
    merged.update(load_file())
    merged.update(load_env())
    merged.update({k: v for k, v in flags.items() if v is not None and k in DEFAULTS})
    return merged
