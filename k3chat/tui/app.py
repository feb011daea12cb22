"""The Textual app: composes the screens, builds conversations, routes keys and commands.

`make_app()` is the one factory both `k3chat.cli` (through `run_tui`) and the tests use
(STYLE.md item 15). Building a conversation may load the model, so it runs on a worker with
the loading screen fed by the engine's progress callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding

from k3chat.tui import dispatch
from k3chat.tui.approver import TuiApprover
from k3chat.tui.screens.chat import ChatScreen
from k3chat.tui.screens.loading import LoadingScreen
from k3chat.tui.screens.session_picker import SessionPicker

MakeConversation = Callable[..., Any]
"""`make_conversation(session, *, approver, progress) -> Conversation`.

`session` is a `k3chat.session.Session` to resume, or None for a new conversation; `approver`
answers the agent's approval requests; `progress(stage, done, total)` reports model loading.
Called on a worker thread, once per conversation; the caller keeps the engine between calls.
"""

QUIT_WINDOW_S = 2.0
"""A second Ctrl-C within this many seconds quits."""

THEMES = {"dark": "textual-dark", "light": "textual-light"}


def resolve_theme(name: str | None) -> str:
    """`dark`/`light` or any built-in Textual theme name -> the Textual theme to use.

    Raises:
        UsageError: an unknown name (it comes from a flag, `K3CHAT_THEME` or config.toml, so
            it is the user's to fix; Textual would raise deep inside the app instead).
    """
    from textual.theme import BUILTIN_THEMES

    from k3chat.errors import UsageError

    theme = THEMES.get(name or "dark", name or "dark")
    if theme not in BUILTIN_THEMES:
        raise UsageError(
            f"unknown theme {name!r}",
            hint="use dark, light or a Textual theme: " + ", ".join(sorted(BUILTIN_THEMES)),
        )
    return theme


class K3ChatApp(App[None]):
    """k3chat's TUI; exits with an exit code, and `error` set when it could not start."""

    TITLE = "k3chat"
    BINDINGS = [
        Binding("ctrl+c", "interrupt", "Stop / quit", priority=True, show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True, show=False),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
    ]

    def __init__(
        self,
        *,
        make_conversation: MakeConversation,
        store: Any,
        resume: str | None = None,
        pick_session: bool = False,
        theme: str = "dark",
        attachment: str | None = None,
        attachment_names: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.make_conversation = make_conversation
        self.store = store
        """The `k3chat.session.SessionStore` for /sessions, /resume and /rename (None: --no-save)."""
        self.resume = resume
        self.pick_session = pick_session
        self.theme = resolve_theme(theme)
        self.attachment = attachment
        """`-f FILE` text, put before the first message sent (then cleared)."""
        self.attachment_names = attachment_names or []
        self.approver = TuiApprover(self)
        self.chat = ChatScreen()
        self.error: BaseException | None = None
        """Why the app could not start (the first conversation failed to build)."""
        self._last_ctrl_c = -QUIT_WINDOW_S

    def on_mount(self) -> None:
        self.push_screen(self.chat)
        if self.pick_session and self.store is not None:
            self.push_screen(SessionPicker(self.store.list()), self._picked_at_start)
        else:
            self.open_session(self.resume, first=True)

    def _picked_at_start(self, session_id: str | None) -> None:
        self.open_session(session_id, first=True)

    # -- conversations -------------------------------------------------------------------
    def open_session(self, ref: str | None, *, first: bool = False) -> None:
        """Build a conversation for session `ref` (None: a new one) and show it."""
        if self.chat.busy:
            self.notify("Stop the running reply first (Ctrl+C).", severity="warning")
            return
        loading = LoadingScreen("Loading model" if first else "Opening session")
        self.push_screen(loading)
        self._build(ref, loading, first)

    @work(thread=True, exclusive=True, group="build", exit_on_error=False)
    def _build(self, ref: str | None, loading: LoadingScreen, first: bool) -> None:
        def progress(stage: str, done: int, total: int) -> None:
            self.call_from_thread(loading.progress, stage, done, total)

        try:
            session = self.store.open(ref) if ref else None
            conversation = self.make_conversation(
                session, approver=self.approver, progress=progress
            )
        except Exception as exc:
            self.call_from_thread(self._build_failed, exc, loading, first)
        else:
            self.call_from_thread(self._built, conversation, loading)

    async def _built(self, conversation: Any, loading: LoadingScreen) -> None:
        loading.dismiss()
        await self.chat.attach(conversation)

    def _build_failed(self, exc: Exception, loading: LoadingScreen, first: bool) -> None:
        loading.dismiss()
        if first and self.chat.conversation is None:
            self.error = exc
            self.exit(return_code=1)
        else:
            self.notify(str(exc), title="Could not open the session", severity="error")

    async def run_command(self, name: str, arg: str) -> None:
        await dispatch.run_command(self, name, arg)

    # -- keys ----------------------------------------------------------------------------
    def action_interrupt(self) -> None:
        """Ctrl-C: stop the reply; a second Ctrl-C soon after quits."""
        now = time.monotonic()
        second = now - self._last_ctrl_c < QUIT_WINDOW_S
        self._last_ctrl_c = now
        if self.chat.interrupt():
            self.notify("Stopped. Press Ctrl+C again to quit.", timeout=QUIT_WINDOW_S)
        elif second:
            self.exit(return_code=0)
        else:
            self.notify("Press Ctrl+C again to quit.", timeout=QUIT_WINDOW_S)

    async def action_quit(self) -> None:
        self.chat.interrupt()
        self.exit(return_code=0)

    def action_toggle_theme(self) -> None:
        self.theme = THEMES["light"] if self.theme == THEMES["dark"] else THEMES["dark"]

    @property
    def session_id(self) -> str | None:
        """The session on screen, for the `k3chat --resume <id>` hint after exit."""
        return getattr(self.chat.conversation, "session_id", None)


def make_app(*, make_conversation: MakeConversation, store: Any, options: Any = None) -> K3ChatApp:
    """Build the app from cli options (`resume`, `pick_session`, `theme`, `attachment`,
    `attachment_names`; all optional)."""
    return K3ChatApp(
        make_conversation=make_conversation,
        store=store,
        resume=getattr(options, "resume", None) or None,
        pick_session=bool(getattr(options, "pick_session", False)),
        theme=getattr(options, "theme", None) or "dark",
        attachment=getattr(options, "attachment", None),
        attachment_names=list(getattr(options, "attachment_names", None) or []),
    )


def run_tui(*, make_conversation: MakeConversation, store: Any, options: Any = None) -> int:
    """Run the TUI until the user quits; returns the exit code.

    Raises:
        whatever building the first conversation raised (a typed `k3chat` or engine error),
        after the terminal is restored, so `cli` reports it as one line.
    """
    app = make_app(make_conversation=make_conversation, store=store, options=options)
    app.run()
    if app.error is not None:
        raise app.error
    return app.return_code or 0
