"""Slash commands on screen: `k3chat.commands` does the work, this module shows it.

Commands that switch or stream (/new, /resume, /sessions, /compact) go through the app's
workers and screens so the UI never blocks; the rest run `commands.run` and show its result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.containers import VerticalScroll

from k3chat import commands
from k3chat.tui.screens.session_picker import SessionPicker
from k3chat.tui.widgets.notice import Notice

if TYPE_CHECKING:
    from k3chat.tui.app import K3ChatApp

TUI_KEYS = (
    "Enter send · Ctrl+J or Alt+Enter newline · ↑ history · Tab complete a command\n"
    "Ctrl+C stop the reply · Ctrl+C twice or Ctrl+Q quit · Ctrl+O copy the last reply\n"
    "Ctrl+T light/dark theme"
)
ANYTIME = ("/help", "/quit", "/clear")
"""Commands that may run while a reply streams."""


def help_text() -> str:
    """The shared command table without line mode's key line, plus the TUI's keys."""
    table = commands.help_text().splitlines()[: len(commands.COMMANDS)]
    return "\n".join(table) + "\n\n" + TUI_KEYS


def _no_switch(session: object) -> object:
    raise AssertionError("switching conversations goes through K3ChatApp.open_session")


async def run_command(app: K3ChatApp, name: str, arg: str) -> None:
    chat = app.chat
    conv = chat.conversation
    log = chat.query_one("#log", VerticalScroll)

    async def say(text: str, level: str = "info") -> None:
        await log.mount(Notice(text, level=level))

    if chat.busy and name not in ANYTIME:
        await say(f"{name} has to wait until the reply ends (Ctrl+C stops it)", "warning")
        return
    match name:
        case "/help":
            await say(help_text())
        case "/quit" | "/exit":
            app.exit(return_code=0)
        case "/clear":
            await log.remove_children()
        case "/new":
            app.open_session(None)
        case "/sessions" | "/resume" if app.store is None:
            await say("sessions are off (--no-save)", "warning")
        case "/sessions" | "/resume" if name == "/sessions" or not arg:
            app.push_screen(SessionPicker(app.store.list()), _open_picked(app))
        case "/resume":
            app.open_session(arg)
        case "/compact" if conv is not None:
            chat.start_stream(lambda cancel: conv.compact(arg or None, cancel=cancel))
        case _ if conv is None:
            await say("the model is still loading", "warning")
        case _:
            ctx = commands.CommandContext(conv, app.store, _no_switch)
            result = commands.run(f"{name} {arg}".strip(), ctx)
            if result.text:
                await say(result.text, result.level)
            if name == "/rename" and result.level == "info":
                chat.sub_title = arg


def _open_picked(app: K3ChatApp):
    def picked(session_id: str | None) -> None:
        if session_id:
            app.open_session(session_id)

    return picked
