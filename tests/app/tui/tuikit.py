"""Shared helpers for the TUI tests: the app as cli builds it, and waits for it."""

from __future__ import annotations

from typing import Any

from stubs.fake_engine import FakeEngine

from k3chat.conversation import Conversation
from k3chat.session import SessionStore
from k3chat.tui.app import K3ChatApp, make_app
from k3chat.tui.widgets.input import PromptInput

SIZE = (120, 36)


class Options:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def real_factory(store: SessionStore, engine: FakeEngine, cwd: str = "/work", agent=None):
    """make_conversation as cli builds it: real Conversation, real session store."""
    made: list[Conversation] = []

    def make(session, *, approver, progress):
        progress("loading weights", 1, 1)
        agent_ctx = agent(approver) if agent else None
        sampling = engine.default_sampling
        if session is None:
            session = store.create(
                name=None, model_id=engine.model_id, config_hash=engine.config_hash, cwd=cwd
            )
            conv = Conversation(engine, session, sampling=sampling, agent=agent_ctx)
        else:
            conv = Conversation.resume(engine, session, sampling=sampling, agent=agent_ctx)
        made.append(conv)
        return conv

    make.made = made
    return make


def build_app(make_conversation, store, **options) -> K3ChatApp:
    return make_app(make_conversation=make_conversation, store=store, options=Options(**options))


async def settle(pilot, app: K3ChatApp) -> None:
    """Wait until the running turn (if any) ended and the UI caught up."""
    for _ in range(200):
        await pilot.pause(0.02)
        if not app.chat.busy and app.screen is app.chat:
            break
    await pilot.pause()


async def ready(pilot, app: K3ChatApp) -> None:
    """Wait until the first conversation is attached."""
    for _ in range(200):
        if app.chat.conversation is not None and app.screen is app.chat:
            break
        await pilot.pause(0.02)
    app.chat.query_one(PromptInput).cursor_blink = False
    await pilot.pause()
