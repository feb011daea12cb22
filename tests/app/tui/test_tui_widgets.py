from stubs.fake_engine import FakeEngine, tool_call
from textual.app import App, ComposeResult
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat.agent import make_agent
from k3chat.conversation import Conversation
from k3chat.tui.widgets.message import AssistantMessage
from k3chat.tui.widgets.status_bar import StatusBar, human_bytes
from k3chat.tui.widgets.thinking import ThinkingBlock
from k3chat.tui.widgets.tool_call import ToolCallView


class One(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


async def test_a_burst_of_deltas_renders_as_one_markdown_update():
    reply = AssistantMessage()
    async with One(reply).run_test() as pilot:
        appends = []
        original = reply._body.append
        reply._body.append = lambda text: appends.append(text) or original(text)
        for i in range(200):
            reply.append(f"w{i} ")
        assert appends == []
        await pilot.pause(0.2)
        assert len(appends) == 1
        assert reply.shown_text == "".join(f"w{i} " for i in range(200))


async def test_status_bar_shows_model_context_speed_and_memory():
    bar = StatusBar()
    async with One(bar).run_test(size=(120, 3)) as pilot:
        bar.model, bar.quantization = "k3-smol", "nf4"
        bar.context_used, bar.context_limit = 2048, 8192
        bar.decode_tps, bar.memory_bytes = 12.34, 3 * 2**30
        await pilot.pause()
        assert str(bar.render()) == "k3-smol · nf4 │ ctx 2.0k/8.2k (25%) │ 12.3 tok/s │ mem 3.0 GiB"
    assert human_bytes(512) == "512 B"


async def test_resumed_session_replays_tools_and_interrupted_replies(store, tmp_path):
    (tmp_path / "x").write_text("hello\n")
    engine = FakeEngine(script=[[tool_call("read_file", path="x")], "done reading", "partial"])
    session = store.create(name=None, model_id="fake", config_hash=engine.config_hash, cwd="/w")
    agent = make_agent([tmp_path], mode="ask")
    conv = Conversation(engine, session, sampling=engine.default_sampling, agent=agent)
    list(conv.send("first"))
    session.append("user", content="second")
    session.append("assistant", content="cut off here", status="interrupted")
    make = real_factory(store, FakeEngine())
    app = build_app(make, store, resume=session.id)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await settle(pilot, app)
        views = app.chat.query(ToolCallView)
        replies = app.chat.query(AssistantMessage)
        assert [v.call.name for v in views] == ["read_file"]
        assert views[0].state == "ok"
        assert "hello" in str(views[0].query_one(".result").render())
        assert [(r.text, r.interrupted) for r in replies] == [
            ("done reading", False),
            ("cut off here", True),
        ]
        assert not app.chat.query(ThinkingBlock)
        await pilot.press("ctrl+o")
        assert app.clipboard == "cut off here"
