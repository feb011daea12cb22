"""Line mode: a prompt-toolkit prompt, plain streamed replies, the same slash commands.

Used with `--plain`, `TERM=dumb`, or when stdout is no terminal. Ctrl-C during a reply stops
it (the partial reply is kept, marked interrupted); a second Ctrl-C during the same reply
quits with 130. At the prompt Ctrl-C clears the line and Ctrl-D quits.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from k3chat import commands
from k3chat.events import Compacted, Notice, ToolFinished, ToolStarted, TurnEnd
from k3chat.formatters import stats_line
from k3chat_model.events import Stats, TextDelta, ThinkingDelta


class Style:
    """ANSI styling, off with NO_COLOR or when stdout is no terminal."""

    def __init__(self, out: Any) -> None:
        self.on = "NO_COLOR" not in os.environ and out.isatty()

    def dim(self, s: str) -> str:
        return f"\x1b[2m{s}\x1b[0m" if self.on else s

    def warn(self, s: str) -> str:
        return f"\x1b[33m{s}\x1b[0m" if self.on else s


class LineApprover:
    """Asks on the terminal: y = once, a = always for this tool, anything else = no."""

    def __init__(self, ask: Any) -> None:
        self.ask = ask

    def decide(self, req: Any) -> Any:
        from k3chat.agent import ApprovalDecision

        sys.stdout.write(f"\n[approve] {req.summary}\n")
        if getattr(req, "diff", None):
            sys.stdout.write(req.diff + "\n")
        try:
            answer = self.ask("allow? [y]es / [a]lways / [N]o: ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer in ("y", "yes"):
            return ApprovalDecision.yes()
        if answer in ("a", "always"):
            return ApprovalDecision(True, always=True)
        return ApprovalDecision.no("the user declined")


class Renderer:
    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.style = Style(self.out)
        self._thinking = False

    def write(self, s: str) -> None:
        self.out.write(s)
        self.out.flush()

    def event(self, ev: Any) -> None:
        if isinstance(ev, ThinkingDelta):
            if not self._thinking:
                self.write(self.style.dim("thinking: "))
                self._thinking = True
            self.write(self.style.dim(ev.text))
        elif isinstance(ev, TextDelta):
            if self._thinking:
                self.write("\n")
                self._thinking = False
            self.write(ev.text)
        elif isinstance(ev, ToolStarted):
            self.write(self.style.dim(f"\n[tool] {ev.call.name} {ev.call.arguments}\n"))
        elif isinstance(ev, ToolFinished):
            state = "denied" if ev.denied else ("ok" if ev.ok else "failed")
            first = ev.output.splitlines()[0][:100] if ev.output else ""
            self.write(self.style.dim(f"[tool] {ev.call.name}: {state} {first}\n"))
        elif isinstance(ev, Stats):
            self._thinking = False
            if ev.finish_reason != "tool_calls":
                self.write("\n" + self.style.dim(stats_line(ev)) + "\n")
        elif isinstance(ev, Notice):
            self.write(self.style.warn(f"[{ev.level}] {ev.text}") + "\n")
        elif isinstance(ev, Compacted):
            self.write(self.style.dim(f"[compacted {ev.removed_messages} messages]") + "\n")
        elif isinstance(ev, TurnEnd) and ev.interrupted:
            self.write(self.style.warn("[interrupted]") + "\n")


REPLAY_MESSAGES = 10
"""How many of a resumed session's last messages line mode prints again."""


def replay(transcript: Any, r: Renderer, last: int = REPLAY_MESSAGES) -> None:
    """Print the end of a resumed conversation, so the user sees where it stopped.

    The same text the model sees, with cut-off replies marked `[interrupted]` as they were live.
    """
    history = transcript.history
    start = max(0, len(history) - last)
    if start:
        r.write(r.style.dim(f"… {start} earlier messages (/export shows all)") + "\n")
    interrupted = set(transcript.interrupted_at)
    for i in range(start, len(history)):
        m = history[i]
        if m.role == "user":
            r.write(f"> {m.content}\n")
        elif m.role == "assistant":
            if m.content:
                r.write(m.content.rstrip("\n") + "\n")
            for c in m.tool_calls:
                r.write(r.style.dim(f"[tool] {c.name} {c.arguments}") + "\n")
            if i in interrupted:
                r.write(r.style.warn("[interrupted]") + "\n")
        elif m.role == "tool":
            first = m.content.splitlines()[0][:100] if m.content else ""
            r.write(r.style.dim(f"[tool] {m.name}: {first}") + "\n")
    r.write(r.style.dim("— end of history —") + "\n")


def stream(events: Any, renderer: Renderer, cancel: threading.Event) -> None:
    """Render a stream; first SIGINT sets `cancel`, a second raises KeyboardInterrupt."""

    def on_sigint(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        for ev in events:
            renderer.event(ev)
    finally:
        signal.signal(signal.SIGINT, old)


def run_line(app: Any) -> int:
    """The line-mode loop; returns the exit code."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import InMemoryHistory

    from k3chat.cli import Progress, _resume_hint

    r = Renderer()
    prompt = PromptSession(history=InMemoryHistory())
    approver = LineApprover(lambda q: prompt.prompt(q))
    attachment = app.read_attachments()  # before the model loads: a bad path fails fast
    progress = Progress()
    conv = app.make_conversation(app.open_session(), approver=approver, progress=progress)
    progress.close()

    def new_conversation(session: Any) -> Any:
        return app.make_conversation(session, approver=approver)

    r.write(
        f"k3chat · {conv.engine.model_id} · session {conv.session_id or '(not saved)'} · "
        "/help for commands, Ctrl-D to quit\n"
    )
    if conv.transcript.history:
        n = len([m for m in conv.transcript.history if m.role in ("user", "assistant")])
        r.write(r.style.dim(f"resumed: {n} messages") + "\n")
        replay(conv.transcript, r)
    if attachment:
        files = ", ".join(app.opts["file"])
        r.write(r.style.dim(f"attached: {files} (sent with your first message)") + "\n")
    code = 0
    try:
        while True:
            try:
                text = prompt.prompt("> ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                break
            if not text.strip():
                continue
            cancel = threading.Event()
            if commands.parse(text):
                ctx = commands.CommandContext(conv, app.store, new_conversation)
                res = commands.run(text, ctx)
                if res.text:
                    r.write((r.style.warn(res.text) if res.level != "info" else res.text) + "\n")
                if res.clear and r.style.on:
                    r.write("\x1b[2J\x1b[H")
                if res.conversation is not None:
                    conv = res.conversation
                if res.events is not None:
                    stream(res.events, r, cancel)
                if res.quit:
                    break
                continue
            if attachment:
                from k3chat.documents import document_prompt

                text, attachment = document_prompt(attachment, text), None
            try:
                stream(conv.send(text, cancel=cancel), r, cancel)
            except KeyboardInterrupt:
                code = 130
                break
            except Exception as e:
                from k3chat.errors import AppError

                if isinstance(e, AppError):
                    r.write(r.style.warn(f"error: {e}") + "\n")
                    continue
                raise
    finally:
        _resume_hint(conv.session_id)
    return code
