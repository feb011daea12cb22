"""The session store: one directory per session, an append-only event log and a meta file.

Layout (format documented in `sessions/README.md`)::

    <root>/<id>/events.jsonl   one JSON object per line, flushed + fsynced per event, 0600
    <root>/<id>/meta.json      title, name, model, counts; replaced atomically, 0600
    <root>/<id>/state/         optional engine snapshot (an accelerator, never the truth)

The log is the single source of truth: both what the user sees on resume and what the model
sees are rebuilt from it (`k3chat.conversation`). A reader skips a torn or malformed line and
reports it in `Session.warnings`; it never loses the lines before it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from k3chat import __version__
from k3chat.errors import SessionCorrupt, SessionNotFound, SessionWriteError, UsageError

FORMAT_VERSION = 1
EVENT_TYPES = frozenset(
    {
        "session",
        "user",
        "assistant",
        "tool_call",
        "tool_result",
        "system",
        "compaction",
        "interrupted",
    }
)
_FILE_MODE = 0o600
_DIR_MODE = 0o700


def now_iso() -> str:
    """UTC timestamp with milliseconds; sorts lexicographically."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _new_id() -> str:
    # time first so ids sort by creation; 6 hex chars keep ids unique within one second
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _fsync_dir(path: Path) -> None:
    # a rename or a new file is durable only once its directory entry is
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` to `path` via tmp + fsync + os.replace, mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _clean(text: str) -> str:
    # lone surrogates (from bad terminal input) cannot be encoded and would break every resume
    return text.encode("utf-8", "replace").decode("utf-8")


def _sanitize(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {k: _sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v) for v in value]
    return value


@dataclass
class SessionInfo:
    """One row of `SessionStore.list()`."""

    id: str
    name: str | None
    title: str
    created: str
    updated: str
    model_id: str
    cwd: str
    messages: int
    path: Path


class Session:
    """One session directory. Appends are durable when `append` returns."""

    def __init__(self, dir: Path, meta: dict) -> None:
        self.dir = dir
        self.id = dir.name
        self.meta = meta
        self.warnings: list[str] = []
        """Problems found while reading (torn last line, malformed lines)."""
        self._fd: int | None = None

    @property
    def events_path(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def meta_path(self) -> Path:
        return self.dir / "meta.json"

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    def _open_log(self) -> int:
        if self._fd is None:
            fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE)
            # a torn last line (kill -9 mid-write) must not swallow the next event
            size = os.fstat(fd).st_size
            if size:
                with open(self.events_path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        os.write(fd, b"\n")
            self._fd = fd
        return self._fd

    def append(self, type: str, **fields: Any) -> dict:
        """Write one event (one line), flush and fsync it, and return it."""
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown session event type {type!r}")
        event = {"v": FORMAT_VERSION, "type": type, "ts": now_iso(), **_sanitize(fields)}
        line = json.dumps(event, ensure_ascii=False) + "\n"
        try:
            fd = self._open_log()
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        except OSError as e:
            # a partial line is a torn write: readers skip it; reopening makes the next append end it
            self.close()
            raise SessionWriteError(
                f"cannot write to session {self.id}: {e.strerror or e} ({type} event not saved)",
                hint=f"free space or fix {self.dir}; the events written before are intact",
            ) from e
        return event

    def events(self) -> list[dict]:
        """All readable events in order; bad lines are skipped and reported in `warnings`."""
        self.warnings = []
        if not self.events_path.exists():
            raise SessionCorrupt(f"session {self.id} has no events.jsonl", hint=str(self.dir))
        out: list[dict] = []
        with open(self.events_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        # the text after the final newline is either empty or a torn write
        last = len(lines) - 1
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
                if not isinstance(ev, dict) or "type" not in ev:
                    raise ValueError("not an event object")
            except ValueError:
                where = "torn last line" if i >= last - 1 else f"malformed line {i + 1}"
                self.warnings.append(f"session {self.id}: skipped a {where} in events.jsonl")
                continue
            out.append(ev)
        return out

    def update_meta(self, **fields: Any) -> None:
        """Merge `fields` into meta.json (atomically) and bump `updated`."""
        self.meta.update(_sanitize(fields))
        self.meta["updated"] = now_iso()
        try:
            write_json_atomic(self.meta_path, self.meta)
        except OSError as e:
            raise SessionWriteError(
                f"cannot update {self.meta_path}: {e.strerror or e}",
                hint="the event log is intact; meta.json is rebuilt from it",
            ) from e

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"Session({self.id!r})"


class SessionStore:
    """All sessions under one root directory (created 0700 on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)

    def create(
        self, *, name: str | None = None, model_id: str, config_hash: str, cwd: str
    ) -> Session:
        """Make a new session dir with its meta file and a `session` header event."""
        self._ensure_root()
        if name is not None:
            self._check_name_free(name)
        sid = _new_id()
        d = self.root / sid
        d.mkdir(mode=_DIR_MODE)
        os.chmod(d, _DIR_MODE)
        created = now_iso()
        from k3chat.session_migrations import MIGRATIONS

        meta = {
            "format": FORMAT_VERSION,
            "id": sid,
            "name": name,
            "title": "",
            "created": created,
            "updated": created,
            "model_id": model_id,
            "config_hash": config_hash,
            "cwd": cwd,
            "messages": 0,
            "tokens": {"prompt": 0, "completion": 0, "context": 0},
            "migrations": [m.__name__ for m in MIGRATIONS],
        }
        write_json_atomic(d / "meta.json", meta)
        s = Session(d, meta)
        s.append(
            "session",
            format=FORMAT_VERSION,
            app_version=__version__,
            model_id=model_id,
            config_hash=config_hash,
            cwd=cwd,
            created=created,
        )
        _fsync_dir(self.root)
        return s

    def _load(self, d: Path) -> Session:
        from k3chat.session_migrations import migrate

        meta_path = d / "meta.json"
        if not (d / "events.jsonl").exists():
            raise SessionCorrupt(f"{d.name} is not a session (no events.jsonl)", hint=str(d))
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8", errors="replace"))
            if not isinstance(meta, dict):
                raise ValueError("meta.json is not an object")
        except FileNotFoundError:
            meta = {}
        except ValueError as e:
            # meta is derived data: rebuild it from the log rather than lose the session
            meta = {"_rebuilt_because": f"meta.json unreadable: {e}"}
        s = Session(d, meta)
        migrate(s)
        return s

    def _dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.is_dir() and (p / "events.jsonl").exists()]

    def list(self) -> list[SessionInfo]:
        """Every readable session, newest `updated` first."""
        out = []
        for d in self._dirs():
            try:
                m = self._load(d).meta
            except Exception:
                continue
            out.append(
                SessionInfo(
                    id=d.name,
                    name=m.get("name"),
                    title=m.get("title") or "",
                    created=m.get("created", ""),
                    updated=m.get("updated", ""),
                    model_id=m.get("model_id", ""),
                    cwd=m.get("cwd", ""),
                    messages=int(m.get("messages", 0) or 0),
                    path=d,
                )
            )
        out.sort(key=lambda i: (i.updated, i.id), reverse=True)
        return out

    def resolve(self, ref: str) -> Path:
        """The directory for an id, a unique id prefix or a name."""
        ref = ref.strip()
        if not ref:
            raise SessionNotFound("empty session reference")
        dirs = self._dirs()
        for d in dirs:
            if d.name == ref:
                return d
        named = [i.path for i in self.list() if i.name == ref]
        if len(named) == 1:
            return named[0]
        prefixed = [d for d in dirs if d.name.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            ids = ", ".join(sorted(d.name for d in prefixed)[:5])
            raise SessionNotFound(f"session reference {ref!r} is ambiguous", hint=f"matches {ids}")
        raise SessionNotFound(
            f"no session matches {ref!r}", hint=f"see `k3chat sessions list` ({self.root})"
        )

    def open(self, ref: str) -> Session:
        """Open by id, unique id prefix, or name; SessionNotFound otherwise."""
        return self._load(self.resolve(ref))

    def most_recent(self, cwd: str | None = None) -> Session | None:
        """The newest session with at least one message (in `cwd` when given)."""
        for info in self.list():
            if info.messages == 0:
                continue
            if cwd is not None and info.cwd != cwd:
                continue
            return self._load(info.path)
        return None

    def _check_name_free(self, name: str) -> None:
        if not name.strip() or "/" in name:
            raise UsageError(f"invalid session name {name!r}")
        if any(i.name == name for i in self.list()):
            raise UsageError(f"a session named {name!r} already exists")

    def rename(self, ref: str, name: str) -> None:
        s = self.open(ref)
        if s.meta.get("name") == name:
            return
        self._check_name_free(name)
        s.update_meta(name=name)

    def delete(self, ref: str) -> None:
        """Remove the session directory for good (log, meta and snapshot)."""
        d = self.resolve(ref)
        shutil.rmtree(d)
        _fsync_dir(self.root)
