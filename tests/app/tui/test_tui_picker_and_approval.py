import threading

from stubs.fake_engine import FakeEngine, tool_call
from tuikit import SIZE, build_app, ready, real_factory, settle

from k3chat.agent import ApprovalDecision, ApprovalRequest, make_agent
from k3chat.conversation import Conversation
from k3chat.tui.approver import TuiApprover
from k3chat.tui.screens.approval import ApprovalScreen
from k3chat.tui.screens.session_picker import SessionPicker
from k3chat.tui.widgets.message import UserMessage
from k3chat.tui.widgets.tool_call import ToolCallView


def saved_session(store, name, question):
    engine = FakeEngine()
    session = store.create(name=name, model_id="fake", config_hash=engine.config_hash, cwd="/w")
    conv = Conversation(engine, session, sampling=engine.default_sampling)
    list(conv.send(question))
    return session.id


async def test_picker_filters_sessions_and_resumes_the_chosen_one(store):
    saved_session(store, "alpha", "about alpha")
    beta = saved_session(store, "beta", "about beta")
    make = real_factory(store, FakeEngine())
    app = build_app(make, store, pick_session=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, SessionPicker)
        assert len(picker.shown) == 2
        await pilot.press(*"bet")
        assert [s.id for s in picker.shown] == [beta]
        await pilot.press("enter")
        await ready(pilot, app)
        assert app.session_id == beta
        assert [u.source for u in app.chat.query(UserMessage)] == ["about beta"]


async def test_picker_escape_starts_a_new_session(store):
    old = saved_session(store, "alpha", "about alpha")
    app = build_app(real_factory(store, FakeEngine()), store, pick_session=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("escape")
        await ready(pilot, app)
        assert app.session_id not in (None, old)
        assert not app.chat.query(UserMessage)


def agent_for(root):
    return lambda approver: make_agent([root], mode="ask", approver=approver)


async def test_approving_a_write_runs_the_tool_and_shows_its_result(store, tmp_path):
    engine = FakeEngine(
        script=[[tool_call("write_file", path="a.txt", content="hi\n")], "wrote it"]
    )
    make = real_factory(store, engine, agent=agent_for(tmp_path))
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"write", "enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, ApprovalScreen):
                break
        modal = app.screen
        assert isinstance(modal, ApprovalScreen)
        assert "a.txt" in modal.request.summary and "+hi" in modal.request.diff
        await pilot.press("y")
        await settle(pilot, app)
        view = app.chat.query_one(ToolCallView)
        assert view.state == "ok"
    assert (tmp_path / "a.txt").read_text() == "hi\n"


async def test_no_with_feedback_refuses_and_passes_the_reason_on(store, tmp_path):
    engine = FakeEngine(script=[[tool_call("write_file", path="a.txt", content="x")], "ok"])
    make = real_factory(store, engine, agent=agent_for(tmp_path))
    app = build_app(make, store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await pilot.press(*"write", "enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, ApprovalScreen):
                break
        await pilot.press("f", *"fix any name in b.txt", "enter")
        await settle(pilot, app)
        assert app.chat.query_one(ToolCallView).state == "denied"
    assert not (tmp_path / "a.txt").exists()
    tool_msgs = [m for m in engine.calls[-1] if m.role == "tool"]
    assert "fix any name in b.txt" in tool_msgs[0].content


async def test_approver_answers_no_when_the_turn_is_cancelled(store):
    app = build_app(real_factory(store, FakeEngine()), store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        approver: TuiApprover = app.approver
        approver.cancel = threading.Event()
        req = ApprovalRequest("run_shell", {"command": "ls"}, "shell", "run ls", "ls")
        answer: list[ApprovalDecision] = []
        worker = threading.Thread(target=lambda: answer.append(approver.decide(req)))
        worker.start()
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, ApprovalScreen):
                break
        assert isinstance(app.screen, ApprovalScreen)
        approver.cancel.set()
        for _ in range(100):
            await pilot.pause(0.02)
            if answer:
                break
        worker.join(1)
        assert answer and not answer[0].allow
        assert app.screen is app.chat
