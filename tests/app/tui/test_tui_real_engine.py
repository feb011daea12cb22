import pytest
import torch
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat.tui.widgets.message import AssistantMessage
from k3chat.tui.widgets.status_bar import StatusBar
from k3chat_model.engine import Engine
from k3chat_model.testing import make_checkpoint


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    torch.set_num_threads(2)
    path = tmp_path_factory.mktemp("ck") / "k3-tiny"
    make_checkpoint(path, preset="k3-tiny", seed=0)
    engine = Engine.load(path)
    engine.default_sampling.max_tokens = 400
    return engine


@pytest.mark.slow
async def test_real_tiny_engine_streams_and_ctrl_c_keeps_the_logged_partial(store, tiny_engine):
    make = real_factory(store, tiny_engine)
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        assert app.chat.query_one(StatusBar).context_limit == tiny_engine.context_length
        await pilot.press(*"hello", "enter")
        for _ in range(1500):
            await pilot.pause(0.02)
            replies = app.chat.query(AssistantMessage)
            if replies and len(replies[0].text) >= 8:
                break
        await pilot.press("ctrl+c")
        await settle(pilot, app)
        reply = app.chat.query_one(AssistantMessage)
        print("DEBUG", repr(reply.text), make.made[0].last_stats)
        assert reply.interrupted and len(reply.text) >= 8
        assert reply.shown_text == reply.text
    logged = [e for e in make.made[0].session.events() if e["type"] == "assistant"]
    assert logged[-1]["status"] == "interrupted"
    assert logged[-1]["content"] == reply.text
