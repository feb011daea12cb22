"""What `k3chat` (cli) hands the TUI: theme, `-f` attachments, and no stderr warnings."""

from __future__ import annotations

import pytest
from stubs.fake_engine import FakeEngine
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat import cli, config
from k3chat.errors import UsageError
from k3chat.session import SessionStore
from k3chat.tui.app import make_app
from k3chat.tui.widgets.message import UserMessage
from k3chat.tui.widgets.notice import Notice


def _interactive_app(tmp_path, monkeypatch, **flags) -> cli.App:
    monkeypatch.setenv("K3CHAT_FAKE_ENGINE", "1")
    monkeypatch.chdir(tmp_path)
    opts = config.resolve({"sessions_dir": str(tmp_path / "sessions"), **flags})
    opts.update({k: flags.get(k) for k in ("file", "resume", "cont", "session", "no_save")})
    opts["agent"] = False
    return cli.App(opts)


@pytest.fixture
def captured_tui(monkeypatch):
    """Replace run_tui by a stand-in that builds the first conversation as the TUI would."""
    import k3chat.tui.app as tui_app

    seen: dict = {}

    def fake_run_tui(*, make_conversation, store, options):
        seen["options"] = options
        session = store.open(options.resume) if options.resume else None
        seen["conv"] = make_conversation(session, approver=None, progress=lambda *a: None)
        return 0

    monkeypatch.setattr(tui_app, "run_tui", fake_run_tui)
    return seen


def test_tui_mode_leaves_warnings_to_the_screen_not_stderr(
    tmp_path, monkeypatch, capsys, captured_tui
):
    store = SessionStore(tmp_path / "sessions")
    s = store.create(name=None, model_id="fake", config_hash="fake-hash-1", cwd=str(tmp_path))
    s.append("user", content="a question whose reply was never saved")
    app = _interactive_app(tmp_path, monkeypatch, resume=s.id)
    assert cli.run_interactive(app, plain=False) == 0
    assert captured_tui["conv"].warnings  # the repair warning exists: the TUI lists it
    err = capsys.readouterr().err
    assert "warning" not in err
    assert f"resume with: k3chat --resume {s.id}" in err


@pytest.mark.parametrize("source", ["env", "config", "flag"])
def test_the_configured_theme_reaches_the_tui(tmp_path, monkeypatch, captured_tui, source):
    flags = {}
    if source == "env":
        monkeypatch.setenv("K3CHAT_THEME", "light")
    elif source == "config":
        cfg = tmp_path / "k3home"
        cfg.mkdir()
        monkeypatch.setenv("K3CHAT_HOME", str(cfg))
        (cfg / "config.toml").write_text('theme = "light"\n')
    else:
        flags["theme"] = "light"
    app = _interactive_app(tmp_path, monkeypatch, **flags)
    cli.run_interactive(app, plain=False)
    assert captured_tui["options"].theme == "light"
    assert make_app(make_conversation=None, store=None, options=captured_tui["options"]).theme == (
        "textual-light"
    )


def test_an_unknown_theme_is_a_usage_error_before_the_screen_opens():
    from tuikit import Options

    with pytest.raises(UsageError, match="unknown theme 'neon'"):
        make_app(make_conversation=None, store=None, options=Options(theme="neon"))


def test_attachments_are_read_by_cli_and_handed_to_the_tui(tmp_path, monkeypatch, captured_tui):
    (tmp_path / "notes.txt").write_text("zebra facts\n\nmore facts")
    app = _interactive_app(tmp_path, monkeypatch, file=["notes.txt"])
    cli.run_interactive(app, plain=False)
    opts = captured_tui["options"]
    assert opts.attachment_names == ["notes.txt"]
    assert "## file: notes.txt" in opts.attachment and "zebra facts" in opts.attachment


def test_a_missing_attachment_fails_before_the_tui_starts(tmp_path, monkeypatch, captured_tui):
    from k3chat.errors import InputError

    app = _interactive_app(tmp_path, monkeypatch, file=["nope.txt"])
    with pytest.raises(InputError, match="cannot read nope.txt"):
        cli.run_interactive(app, plain=False)
    assert "options" not in captured_tui


async def test_the_attachment_rides_with_the_first_message_only(store):
    engine = FakeEngine(script=["got it", "again"])
    make = real_factory(store, engine)
    app = build_app(
        make, store, attachment="## file: notes.txt\n\nzebra facts", attachment_names=["notes.txt"]
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        notices = [str(n.render()) for n in app.chat.query(Notice)]
        assert any("attached: notes.txt" in n for n in notices)
        await pilot.press(*"summarise", "enter")
        await settle(pilot, app)
        await pilot.press(*"and now", "enter")
        await settle(pilot, app)
        # the screen shows what was typed; the model gets the document in front of it
        assert [u.source for u in app.chat.query(UserMessage)] == ["summarise", "and now"]
    users = [e["content"] for e in make.made[0].session.events() if e["type"] == "user"]
    assert users[0].startswith("<document>\n## file: notes.txt\n\nzebra facts\n</document>")
    assert users[0].endswith("summarise")
    assert users[1] == "and now"
