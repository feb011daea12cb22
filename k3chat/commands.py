"""Slash commands, independent of any UI: parse a line, act on the conversation, say what.

Line mode renders a `CommandResult` as text; the TUI can do the same with widgets. Commands
never print: they return text, a stream of conversation events, or a new conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k3chat.errors import AppError

COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("/help", "", "show this list"),
    ("/new", "", "start a new session"),
    ("/sessions", "", "list saved sessions"),
    ("/resume", "ID|NAME", "switch to a saved session"),
    ("/rename", "NAME", "name this session"),
    ("/export", "[PATH]", "write the conversation as Markdown (.json: JSON)"),
    ("/compact", "[FOCUS]", "summarise older turns to free context"),
    ("/model", "", "show the model, quantization and context size"),
    ("/system", "[TEXT]", "set the system prompt (no text: clear it)"),
    ("/think", "[on|off]", "toggle thinking mode"),
    ("/clear", "", "clear the screen (the model keeps the conversation)"),
    ("/quit", "", "quit (the session stays resumable)"),
)
NAMES = tuple(c[0] for c in COMMANDS)


@dataclass
class CommandResult:
    text: str = ""
    """What to tell the user (may be several lines)."""
    level: str = "info"
    quit: bool = False
    clear: bool = False
    conversation: Any = None
    """A conversation to switch to (/new, /resume)."""
    events: Iterator[Any] | None = None
    """A stream to render like a reply (/compact)."""


@dataclass
class CommandContext:
    conversation: Any
    store: Any
    new_conversation: Callable[[Any], Any]
    """`new_conversation(session_or_None) -> Conversation` (None: a fresh session)."""


def parse(text: str) -> tuple[str, str] | None:
    """`"/rename  my chat"` -> `("/rename", "my chat")`; None for text meant for the model.

    "/usr/bin is a path" is text: a command is "/" + letters with no second "/".
    """
    if not text.startswith("/") or len(text) < 2 or not text[1].isalpha():
        return None
    name, _, arg = text.partition(" ")
    if "/" in name[1:]:
        return None
    return name.lower(), arg.strip()


def help_text() -> str:
    width = max(len(f"{n} {a}".strip()) for n, a, _ in COMMANDS)
    lines = [f"{f'{n} {a}'.strip():<{width}}  {h}" for n, a, h in COMMANDS]
    lines.append("Ctrl+C stops a reply; Ctrl+C twice or Ctrl+D quits.")
    return "\n".join(lines)


def run(text: str, ctx: CommandContext) -> CommandResult:
    """Execute one slash command line; errors come back as a warning result."""
    parsed = parse(text)
    if parsed is None:
        return CommandResult(f"not a command: {text}", "warning")
    name, arg = parsed
    try:
        return _run(name, arg, ctx)
    except AppError as e:
        return CommandResult(f"{e.msg}" + (f" ({e.hint})" if e.hint else ""), "error")


def _run(name: str, arg: str, ctx: CommandContext) -> CommandResult:
    conv = ctx.conversation
    store = ctx.store
    if name == "/help":
        return CommandResult(help_text())
    if name == "/quit" or name == "/exit":
        return CommandResult(quit=True)
    if name == "/clear":
        return CommandResult(clear=True)
    if name == "/new":
        new = ctx.new_conversation(None)
        return CommandResult(f"new session {new.session_id or '(not saved)'}", conversation=new)
    if name == "/sessions" or (name == "/resume" and not arg):
        if store is None:
            return CommandResult("sessions are off (--no-save)", "warning")
        rows = store.list()[:20]
        if not rows:
            return CommandResult("no saved sessions")
        lines = [f"{i.id}  {i.messages:>3} msgs  {i.name or i.title or '(empty)'}" for i in rows]
        return CommandResult("\n".join(lines) + "\n/resume ID|NAME to open one")
    if name == "/resume":
        if store is None:
            return CommandResult("sessions are off (--no-save)", "warning")
        new = ctx.new_conversation(store.open(arg))
        n = len([m for m in new.messages if m.role in ("user", "assistant")])
        return CommandResult(f"resumed {new.session_id} ({n} messages)", conversation=new)
    if name == "/rename":
        if not arg or conv.session is None or store is None:
            return CommandResult("usage: /rename NAME (the session must be saved)", "warning")
        store.rename(conv.session.id, arg)
        conv.session.meta["name"] = arg
        return CommandResult(f"session renamed to {arg!r}")
    if name == "/export":
        return _export(conv, arg)
    if name == "/compact":
        return CommandResult(events=conv.compact(arg or None))
    if name == "/model":
        e = conv.engine
        return CommandResult(
            f"model {e.model_id} · quantization {e.quantization or 'none'} · context "
            f"{conv.context_used}/{conv.context_limit} tokens · config {str(e.config_hash)[:12]}"
        )
    if name == "/system":
        conv.set_system(arg or None)
        return CommandResult(f"system prompt set: {arg}" if arg else "system prompt cleared")
    if name == "/think":
        on = {"on": True, "off": False}.get(arg.lower(), not conv.thinking)
        if on and not getattr(conv.engine, "supports_thinking", True):
            return CommandResult("this model has no thinking mode", "warning")
        conv.set_thinking(on)
        return CommandResult(f"thinking {'on' if on else 'off'}")
    return CommandResult(f"unknown command {name}; /help lists them", "warning")


def _export(conv: Any, arg: str) -> CommandResult:
    from k3chat import export

    if conv.session is None:
        return CommandResult("nothing to export: this conversation is not saved", "warning")
    target = Path(arg or f"k3chat-{conv.session_id}.md").expanduser()
    as_json = target.suffix == ".json"
    text = export.to_json(conv.session) if as_json else export.to_markdown(conv.session)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as e:
        return CommandResult(f"could not write {target}: {e.strerror}", "error")
    return CommandResult(f"exported to {target}")
