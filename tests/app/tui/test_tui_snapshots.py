from fakes import WAIT_FOR_CANCEL, ScriptedConversation
from snapshot import assert_snapshot
from tuikit import SIZE, build_app, ready, settle

from k3chat.agent import ApprovalRequest
from k3chat.events import Compacted, ToolFinished, ToolStarted, TurnEnd
from k3chat.session import SessionInfo
from k3chat.tui.screens.approval import ApprovalScreen
from k3chat.tui.screens.session_picker import SessionPicker
from k3chat_model.events import Stats, TextDelta, ThinkingDelta, ToolCall, ToolCallParsed

REPLY = (
    "Here is a function that adds two numbers:\n\n"
    "```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```\n\n"
    "It works for **any** integers."
)
STATS = Stats(
    prompt_tokens=40,
    prefilled_tokens=40,
    completion_tokens=32,
    prefill_s=0.2,
    decode_s=1.6,
    finish_reason="stop",
    context_tokens=96,
)


def deltas(text: str, size: int = 7) -> list[TextDelta]:
    return [TextDelta(text[i : i + size]) for i in range(0, len(text), size)]


def scripted_app(turns, store, **options):
    conv = ScriptedConversation(turns)
    app = build_app(lambda session, *, approver, progress: conv, store, **options)
    return app, conv


async def send(pilot, text: str) -> None:
    pilot.app.chat.query_one("#prompt").load_text(text)
    await pilot.press("enter")
    await settle(pilot, pilot.app)
    await pilot.pause(0.1)


async def test_snapshot_reply_with_code_block_and_thinking_collapsed(store, tmp_path):
    turn = [ThinkingDelta("The user wants an add function. "), ThinkingDelta("Keep it short.")]
    turn += [*deltas(REPLY), STATS, TurnEnd(REPLY, False)]
    app, _ = scripted_app([turn], store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await send(pilot, "write an add function in python")
        assert_snapshot(app, "reply_with_code_block_and_thinking_collapsed", tmp_path)


async def test_snapshot_tool_call_shows_call_then_result(store, tmp_path):
    call = ToolCall("read_file", {"path": "README.md"}, index=1)
    first = Stats(30, 30, 12, 0.1, 0.4, "tool_calls", 50)
    turn = [
        TextDelta("Let me read it."),
        ToolCallParsed(call),
        first,
        ToolStarted(call),
        ToolFinished(call, "# k3chat\nA terminal chat app.\n", ok=True),
        *deltas("The README says k3chat is a terminal chat app."),
        STATS,
        TurnEnd("The README says k3chat is a terminal chat app.", False),
    ]
    app, _ = scripted_app([turn], store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await send(pilot, "what does the README say?")
        assert_snapshot(app, "tool_call_shows_call_then_result", tmp_path)


async def test_snapshot_interrupted_reply_keeps_partial_text(store, tmp_path):
    turn = [*deltas("A long story begins. Once upon a time"), WAIT_FOR_CANCEL]
    app, _ = scripted_app([turn], store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        app.chat.query_one("#prompt").load_text("tell me a long story")
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if app.chat.query("AssistantMessage"):
                break
        app.chat.interrupt()
        await settle(pilot, app)
        await pilot.pause(0.1)
        assert_snapshot(app, "interrupted_reply_keeps_partial_text", tmp_path)


async def test_snapshot_compaction_notice_and_help(store, tmp_path):
    app, conv = scripted_app([[Compacted("summary", 12), TurnEnd("", False)]], store)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await send(pilot, "/help")
        await send(pilot, "compact please")
        assert_snapshot(app, "compaction_notice_and_help", tmp_path)


async def test_snapshot_approval_modal_shows_the_diff(store, tmp_path):
    app, _ = scripted_app([], store)
    req = ApprovalRequest(
        tool="edit_file",
        arguments={"path": "src/app.py"},
        kind="write",
        summary="edit_file src/app.py (+2 -1)",
        diff="--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,3 @@\n import os\n-x = 1\n+x = 2\n+y = 3\n",
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await app.push_screen(ApprovalScreen(req))
        await pilot.pause(0.1)
        assert_snapshot(app, "approval_modal_shows_the_diff", tmp_path)


async def test_snapshot_session_picker_light_theme(store, tmp_path):
    rows = [
        SessionInfo(
            id=f"20260101-12000{i}-abc12{i}",
            name=name,
            title=title,
            created=f"2026-01-0{i + 1}T12:00:00",
            updated=f"2026-01-0{i + 1}T12:30:00",
            model_id="k3-smol",
            cwd="/work",
            messages=4 * (i + 1),
            path=tmp_path / str(i),
        )
        for i, (name, title) in enumerate([(None, "Fix the parser"), ("release", "Release notes")])
    ]
    app, _ = scripted_app([], store, theme="light")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, app)
        await app.push_screen(SessionPicker(list(reversed(rows))))
        await pilot.pause(0.1)
        assert_snapshot(app, "session_picker_light_theme", tmp_path)
