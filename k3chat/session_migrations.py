"""Ordered migrations of session directories, recorded by name in meta.json["migrations"].

Each migration takes a `Session` whose meta may be old or partial and upgrades it in place.
They run when a session is opened; new sessions record all of them as already applied.
Add new ones at the end of `MIGRATIONS`; never reorder or remove one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from k3chat.session import Session


def m001_meta_from_header(s: Session) -> None:
    """Fill meta fields missing in pre-release sessions (or a lost meta.json) from the log."""
    from k3chat.session import FORMAT_VERSION, now_iso

    events = s.events()
    header = next((e for e in events if e.get("type") == "session"), {})
    m = s.meta
    m.setdefault("format", FORMAT_VERSION)
    m["id"] = s.id
    m.setdefault("name", None)
    m.setdefault("created", header.get("created") or header.get("ts") or now_iso())
    m.setdefault("updated", events[-1].get("ts", m["created"]) if events else m["created"])
    m.setdefault("model_id", header.get("model_id", ""))
    m.setdefault("config_hash", header.get("config_hash", ""))
    m.setdefault("cwd", header.get("cwd", ""))
    m.setdefault("tokens", {"prompt": 0, "completion": 0, "context": 0})
    if "messages" not in m:
        m["messages"] = sum(1 for e in events if e.get("type") in ("user", "assistant"))


def m002_title_from_first_user_message(s: Session) -> None:
    """Sessions written before titles existed get the first user message as their title."""
    if s.meta.get("title"):
        return
    first = next((e for e in s.events() if e.get("type") == "user"), None)
    s.meta["title"] = make_title(first.get("content", "")) if first else ""


def make_title(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


MIGRATIONS: list[Callable[[Session], None]] = [
    m001_meta_from_header,
    m002_title_from_first_user_message,
]


def migrate(s: Session) -> None:
    """Run every migration `s` has not had yet and record them in meta.json."""
    done = list(s.meta.get("migrations") or [])
    pending = [m for m in MIGRATIONS if m.__name__ not in done]
    if not pending:
        return
    for m in pending:
        m(s)
        done.append(m.__name__)
    from k3chat.session import write_json_atomic

    s.meta["migrations"] = done
    try:
        # not update_meta: a migration must not make an old session look recently used
        write_json_atomic(s.meta_path, s.meta)
    except OSError:
        # a read-only session dir can still be read; the migration reruns next time
        pass
