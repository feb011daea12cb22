from stubs.fake_engine import FakeEngine
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat.tui.widgets.message import AssistantMessage, UserMessage
from k3chat.tui.widgets.status_bar import StatusBar


async def test_sent_message_streams_into_a_reply_and_is_logged(store):
    engine = FakeEngine(script=["Hello **there**, general Kenobi."])
    make = real_factory(store, engine)
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"hi there", "enter")
        await settle(pilot, app)
        users = app.chat.query(UserMessage)
        replies = app.chat.query(AssistantMessage)
        assert [u.source for u in users] == ["hi there"]
        assert len(replies) == 1
        assert replies[0].shown_text == "Hello **there**, general Kenobi."
        assert not replies[0].interrupted
        status = app.chat.query_one(StatusBar)
        assert status.model == "fake" and status.context_limit == 4096
        assert status.context_used > 0
    events = make.made[0].session.events()
    assert [e["type"] for e in events if e["type"] != "session"] == ["user", "assistant"]
    assert events[-1]["status"] == "complete"


async def test_ctrl_c_mid_reply_keeps_the_partial_text_marked_interrupted(store):
    words = " ".join(f"w{i}" for i in range(400))
    engine = FakeEngine(script=[words], delay=0.01)
    make = real_factory(store, engine)
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"go", "enter")
        for _ in range(200):
            await pilot.pause(0.02)
            replies = app.chat.query(AssistantMessage)
            if replies and len(replies[0].text.split()) >= 5:
                break
        await pilot.press("ctrl+c")
        await settle(pilot, app)
        reply = app.chat.query_one(AssistantMessage)
        partial = reply.shown_text
        assert reply.interrupted and reply.has_class("-interrupted")
        assert 5 <= len(partial.split()) < 400
        assert words.startswith(partial)
        assert "interrupted" in str(reply.query_one(".footer").render())
        assert app.is_running
    logged = make.made[0].session.events()[-1]
    assert logged["type"] == "assistant" and logged["status"] == "interrupted"
    assert logged["content"] == partial


async def test_second_ctrl_c_quits_and_leaves_the_session_resumable(store):
    make = real_factory(store, FakeEngine(script=["one two three"]))
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"hello", "enter")
        await settle(pilot, app)
        await pilot.press("ctrl+c")
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0
    assert app.session_id == make.made[0].session.id
    logged = store.open(app.session_id).events()
    assert [e["content"] for e in logged if e["type"] == "user"] == ["hello"]


async def test_ctrl_j_adds_a_newline_and_up_recalls_history(store):
    make = real_factory(store, FakeEngine())
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press("a", "ctrl+j", "b", "enter")
        await settle(pilot, app)
        assert app.chat.query(UserMessage)[0].source == "a\nb"
        prompt = app.chat.query_one("#prompt")
        assert prompt.text == ""
        await pilot.press("up")
        assert prompt.text == "a\nb"
        await pilot.press("down")
        assert prompt.text == ""


async def test_ctrl_q_mid_reply_quits_and_the_log_marks_the_reply_interrupted(store):
    import time

    words = " ".join(f"w{i}" for i in range(400))
    make = real_factory(store, FakeEngine(script=[words], delay=0.01))
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"go", "enter")
        for _ in range(200):
            await pilot.pause(0.02)
            if app.chat.query(AssistantMessage):
                break
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    session = make.made[0].session
    for _ in range(100):
        replies = [e for e in session.events() if e["type"] == "assistant"]
        if replies:
            break
        time.sleep(0.05)
    assert replies and replies[-1]["status"] == "interrupted"
