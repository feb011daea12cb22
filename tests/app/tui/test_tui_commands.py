from stubs.fake_engine import FakeEngine
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat import commands
from k3chat.tui.widgets.message import UserMessage
from k3chat.tui.widgets.notice import Notice


def notices(app) -> list[str]:
    return [str(n.render()) for n in app.chat.query(Notice)]


async def run(pilot, text: str) -> None:
    prompt = pilot.app.chat.query_one("#prompt")
    prompt.load_text(text)
    await pilot.press("enter")
    await pilot.pause()


async def test_tab_completes_a_command_and_hints_show_matches(store):
    app = build_app(real_factory(store, FakeEngine()), store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press("/", "r")
        hints = app.chat.query_one("#hints")
        assert (
            hints.display and "/rename" in str(hints.render()) and "/resume" in str(hints.render())
        )
        await pilot.press("e", "n", "tab")
        assert app.chat.query_one("#prompt").text == "/rename "
        assert not hints.display


async def test_help_lists_every_command_and_unknown_ones_are_flagged(store):
    make = real_factory(store, FakeEngine())
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await run(pilot, "/help")
        await run(pilot, "/frobnicate")
        shown = notices(app)
        assert all(name in shown[0] for name in commands.NAMES)
        assert "unknown command /frobnicate" in shown[1]
    assert len(make.made[0].engine.calls) == 0


async def test_rename_system_think_and_export_act_on_the_conversation(store, tmp_path):
    make = real_factory(store, FakeEngine(script=["the answer"]))
    app = build_app(make, store)
    out = tmp_path / "chat.md"
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        conv = make.made[0]
        await run(pilot, "/rename project x")
        await run(pilot, "/system Be terse.")
        await run(pilot, "/think on")
        await run(pilot, "question")
        await settle(pilot, app)
        await run(pilot, f"/export {out}")
        assert conv.thinking is True
        assert conv.messages[0].role == "system" and conv.messages[0].content == "Be terse."
        assert app.chat.sub_title == "project x"
    assert [i.name for i in store.list()] == ["project x"]
    text = out.read_text()
    assert "## User\n\nquestion" in text and "the answer" in text


async def test_new_starts_a_fresh_session_and_resume_brings_the_old_one_back(store):
    make = real_factory(store, FakeEngine(script=["first reply", "second reply"]))
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await run(pilot, "first question")
        await settle(pilot, app)
        first_id = app.session_id
        await run(pilot, "/new")
        await settle(pilot, app)
        assert app.session_id != first_id
        assert not app.chat.query(UserMessage)
        await run(pilot, f"/resume {first_id}")
        await settle(pilot, app)
        assert app.session_id == first_id
        assert [u.source for u in app.chat.query(UserMessage)] == ["first question"]


async def test_quit_command_exits_cleanly(store):
    app = build_app(real_factory(store, FakeEngine()), store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await run(pilot, "/quit")
    assert app.return_code == 0


async def test_session_commands_explain_themselves_without_a_store():
    from k3chat.conversation import Conversation

    engine = FakeEngine()
    app = build_app(
        lambda s, *, approver, progress: Conversation(
            engine, None, sampling=engine.default_sampling
        ),
        None,
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await run(pilot, "/sessions")
        await run(pilot, "/rename x")
        assert "sessions are off" in notices(app)[0]
        assert "usage: /rename" in notices(app)[1]
        assert app.screen is app.chat
