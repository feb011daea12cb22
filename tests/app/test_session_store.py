import json
import os
import stat

import pytest

from k3chat.errors import SessionNotFound, UsageError
from k3chat.session import SessionStore


def _store(tmp_path):
    return SessionStore(tmp_path / "sessions")


def _new(store, name=None, cwd="/w"):
    return store.create(name=name, model_id="m", config_hash="h", cwd=cwd)


def test_files_are_private_and_events_are_lines(tmp_path):
    store = _store(tmp_path)
    s = _new(store)
    s.append("user", content="hello")
    assert stat.S_IMODE(os.stat(s.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(s.events_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(s.meta_path).st_mode) == 0o600
    lines = s.events_path.read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["session", "user"]
    assert all(json.loads(x)["v"] == 1 for x in lines)


def test_append_is_fsynced(tmp_path, monkeypatch):
    store = _store(tmp_path)
    s = _new(store)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    s.append("user", content="x")
    assert synced


def test_torn_last_line_is_skipped_with_warning_and_next_append_survives(tmp_path):
    store = _store(tmp_path)
    s = _new(store)
    s.append("user", content="one")
    with open(s.events_path, "a") as f:
        f.write('{"v":1,"type":"assistant","content":"par')
    s2 = store.open(s.id)
    evs = s2.events()
    assert [e["type"] for e in evs] == ["session", "user"]
    assert any("torn" in w for w in s2.warnings)
    s2.append("user", content="two")
    evs = s2.events()
    assert [e.get("content") for e in evs if e["type"] == "user"] == ["one", "two"]


def test_lone_surrogates_do_not_break_the_log(tmp_path):
    s = _new(_store(tmp_path))
    s.append("user", content="bad \udcff text")
    assert s.events()[-1]["content"].startswith("bad ")


def test_meta_written_atomically_leaves_no_tmp(tmp_path):
    s = _new(_store(tmp_path))
    s.update_meta(title="x")
    assert json.loads(s.meta_path.read_text())["title"] == "x"
    assert [p.name for p in s.dir.iterdir() if p.name.endswith(".tmp")] == []


def test_open_by_id_prefix_and_name(tmp_path):
    store = _store(tmp_path)
    a = _new(store, name="alpha")
    assert store.open(a.id).id == a.id
    assert store.open("alpha").id == a.id
    assert store.open(a.id[:-2]).id == a.id
    with pytest.raises(SessionNotFound):
        store.open("nope")


def test_ambiguous_prefix_is_an_error(tmp_path):
    store = _store(tmp_path)
    _new(store)
    _new(store)
    with pytest.raises(SessionNotFound, match="ambiguous"):
        store.open("2")


def test_list_rename_delete(tmp_path):
    store = _store(tmp_path)
    a = _new(store)
    b = _new(store)
    b.update_meta(messages=2)
    assert [i.id for i in store.list()][0] == b.id
    store.rename(a.id, "work")
    assert store.open("work").id == a.id
    with pytest.raises(UsageError):
        store.rename(b.id, "work")
    store.delete("work")
    assert not a.dir.exists()
    assert [i.id for i in store.list()] == [b.id]


def test_most_recent_skips_empty_sessions_and_other_dirs(tmp_path):
    store = _store(tmp_path)
    a = _new(store, cwd="/a")
    a.update_meta(messages=2)
    _new(store, cwd="/a")
    b = _new(store, cwd="/b")
    b.update_meta(messages=2)
    assert store.most_recent("/a").id == a.id
    assert store.most_recent().id == b.id
    assert store.most_recent("/c") is None


def test_lost_meta_is_rebuilt_from_the_log(tmp_path):
    store = _store(tmp_path)
    s = _new(store)
    s.append("user", content="first question here")
    s.meta_path.unlink()
    s2 = store.open(s.id)
    assert s2.meta["model_id"] == "m"
    assert s2.meta["title"] == "first question here"


def test_disk_full_is_a_clear_error_and_keeps_what_was_saved(tmp_path):
    import os

    from k3chat.errors import SessionWriteError

    store = SessionStore(tmp_path / "sessions")
    s = store.create(name=None, model_id="m", config_hash="h", cwd=str(tmp_path))
    s.append("user", content="kept")
    s.close()
    real = s.events_path.with_name("real.jsonl")
    os.replace(s.events_path, real)
    os.symlink("/dev/full", s.events_path)  # every write: ENOSPC
    with pytest.raises(SessionWriteError, match="No space left on device"):
        s.append("user", content="lost")
    os.unlink(s.events_path)
    os.replace(real, s.events_path)
    again = store.open(s.id)
    assert [e.get("content") for e in again.events() if e["type"] == "user"] == ["kept"]
    again.append("user", content="after")
    assert [e.get("content") for e in again.events() if e["type"] == "user"] == ["kept", "after"]
