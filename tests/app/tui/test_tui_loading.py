import threading

import pytest
from fakes import ScriptedConversation
from textual.widgets import Label, ProgressBar
from tuikit import SIZE, build_app, ready

from k3chat.errors import SessionNotFound
from k3chat.tui.app import run_tui
from k3chat.tui.screens.loading import LoadingScreen
from k3chat_model.errors import CheckpointError


async def test_loading_screen_shows_engine_progress_until_the_model_is_ready(store):
    release = threading.Event()
    reported = threading.Event()

    def make(session, *, approver, progress):
        progress("reading shards", 3, 10)
        reported.set()
        release.wait(5)
        return ScriptedConversation()

    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        reported.wait(5)
        await pilot.pause(0.05)
        screen = app.screen
        assert isinstance(screen, LoadingScreen)
        assert str(screen.query_one("#stage", Label).render()) == "reading shards"
        assert screen.query_one(ProgressBar).percentage == pytest.approx(0.3)
        release.set()
        await ready(pilot, app)
        assert app.screen is app.chat


async def test_a_model_that_fails_to_load_exits_with_the_typed_error(store):
    def make(session, *, approver, progress):
        raise CheckpointError("model.safetensors is truncated")

    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
    assert app.return_code == 1
    assert isinstance(app.error, CheckpointError)


def test_run_tui_raises_the_load_error_for_cli_to_report(store, monkeypatch):
    def make(session, *, approver, progress):
        raise AssertionError("never built: the session does not exist")

    async def headless(self, **kw):
        async with self.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
        return None

    import asyncio

    from k3chat.tui.app import K3ChatApp

    monkeypatch.setattr(K3ChatApp, "run", lambda self: asyncio.run(headless(self)))

    class Options:
        resume = "no-such-session"

    with pytest.raises(SessionNotFound):
        run_tui(make_conversation=make, store=store, options=Options())
