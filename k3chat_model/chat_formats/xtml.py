"""K3's XTML chat format (research/k3-architecture.md §4.2): encoder and incremental parser.

XTML is XML-like markup whose brackets are special tokens::

    <|open|>message role="user"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>

The encoder follows upstream ``encoding_k3.py`` as ported in the reference ``xtml.py``: it
builds a list of segments and BPE-encodes **each segment separately** (merging them changes
the ids). Bracket tokens are encoded with specials allowed; every other piece, tag names and
attribute fragments included, with specials disallowed, so content can never forge markup.

The parser works on ids: a bracket is structure only when it arrives as its special id, so text
that merely spells ``<|open|>`` stays text. Content between brackets goes through a
:class:`StreamingDecoder`, so nothing is held back except an incomplete UTF-8 sequence.
"""

from __future__ import annotations

import json
import re
from typing import Any

from k3chat_model.chat_formats.base import ChatFormat, ChatFormatError, ParsedEvent, StreamParser
from k3chat_model.events import Message, TextDelta, ThinkingDelta, ToolCall, ToolCallParsed
from k3chat_model.tokenizer import StreamingDecoder, Tokenizer

OPEN, CLOSE, SEP, END_OF_MSG = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
XTML_TOKENS = (OPEN, CLOSE, SEP, END_OF_MSG)

TOOL_DECLARE_HEAD = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"

Segment = tuple[str, bool]
"""(text, markup): markup segments are encoded with special tokens allowed."""

# a tag header holds a name and a few attributes; anything longer is garbage from the model
_MAX_HEADER_TOKENS = 256
_ATTR_RE = re.compile(r'([\w-]+)="([^"]*)"')
_JSON_TYPES = {"number", "boolean", "null", "object", "array"}


def deep_sort(obj: Any) -> Any:
    """Sort every dict by key, recursively, so equal tool sets render to equal prompt bytes."""
    if isinstance(obj, dict):
        return {k: deep_sort(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sort(v) for v in obj]
    return obj


def escape_attr(value: Any) -> str:
    """``&`` then ``"``, in that order; ``<``/``>`` stay literal (brackets are tokens)."""
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def unescape_attr(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def xtml_type(value: Any) -> str:
    """The ``type`` attribute of an argument (bool before int: True is an int in Python)."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def xtml_value(value: Any) -> str:
    """Strings raw (the type attribute says what they are), everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _text(text: Any) -> list[Segment]:
    return [(str(text), False)] if str(text) else []


def _open_tag(tag: str, attrs: list[tuple[str, Any]] = ()) -> list[Segment]:
    segs: list[Segment] = [(OPEN, True), *_text(tag)]
    for key, value in attrs:
        segs += _text(f" {key}") + _text('="') + _text(escape_attr(value)) + _text('"')
    return segs + [(SEP, True)]


def _close_tag(tag: str) -> list[Segment]:
    return [(CLOSE, True), *_text(tag), (SEP, True)]


def _message(attrs: list[tuple[str, Any]], body: list[Segment]) -> list[Segment]:
    return _open_tag("message", attrs) + body + _close_tag("message") + [(END_OF_MSG, True)]


def _tool_declare(tools: list[dict]) -> list[Segment]:
    compact = json.dumps(deep_sort(tools), ensure_ascii=False, separators=(",", ":"))
    body = f"{TOOL_DECLARE_HEAD}{compact}\n```"
    return _message([("role", "system"), ("type", "tool-declare")], _text(body))


def _assistant_body(m: Message, thinking: bool) -> list[Segment]:
    segs: list[Segment] = []
    if thinking:
        # the think channel is always present with thinking on, even when empty
        reasoning = m.thinking if m.thinking and m.thinking.strip() else ""
        segs += _open_tag("think") + _text(reasoning) + _close_tag("think")
    segs += _open_tag("response") + _text(m.content) + _close_tag("response")
    if m.tool_calls:
        segs += _open_tag("tools")
        for index, call in enumerate(m.tool_calls, start=1):
            if not call.name:
                raise ChatFormatError("a tool call in the conversation has an empty name")
            segs += _open_tag("call", [("tool", call.name), ("index", index)])
            for key, value in call.arguments.items():
                segs += _open_tag("argument", [("key", key), ("type", xtml_type(value))])
                segs += _text(xtml_value(value)) + _close_tag("argument")
            segs += _close_tag("call")
        segs += _close_tag("tools")
    return segs


def reorder_tool_results(messages: list[Message]) -> list[Message]:
    """Sort each run of tool results into the order of the preceding assistant's calls.

    XTML binds results to calls by position. A run is sorted (stably, by ``tool_index``, the
    1-based position of the call answered) and takes the call's name only when every result in
    it names a call of that assistant message; otherwise it is left as it is, like upstream.
    """
    out: list[Message] = []
    calls: dict[int, str] = {}
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.role != "tool":
            if m.role == "assistant":
                calls = {pos: c.name for pos, c in enumerate(m.tool_calls, start=1)}
            out.append(m)
            i += 1
            continue
        j = i
        while j < len(messages) and messages[j].role == "tool":
            j += 1
        run = messages[i:j]
        if all(r.tool_index in calls for r in run):
            run = sorted(run, key=lambda r: r.tool_index)
            run = [
                Message(
                    role="tool",
                    content=r.content,
                    name=calls[r.tool_index],
                    tool_index=r.tool_index,
                )
                for r in run
            ]
        out += run
        i = j
    return out


def render_segments(
    messages: list[Message],
    *,
    tools: list[dict] | None = None,
    thinking: bool = False,
    add_generation_prompt: bool = True,
) -> list[Segment]:
    """The conversation as XTML segments, in upstream's order: tool declaration, messages, prompt.

    Raises:
        ChatFormatError: an unknown role, a nameless tool call, or a tool result whose tool name
            cannot be resolved.
    """
    segs: list[Segment] = _tool_declare(tools) if tools else []
    calls: list[ToolCall] = []
    tool_pos = 0
    for m in reorder_tool_results(messages):
        if m.role in ("user", "system"):
            attrs = [("role", m.role)] + ([("name", m.name)] if m.name else [])
            segs += _message(attrs, _text(m.content))
        elif m.role == "assistant":
            calls, tool_pos = list(m.tool_calls), 0
            attrs = [("role", "assistant")] + ([("name", m.name)] if m.name else [])
            segs += _message(attrs, _assistant_body(m, thinking))
        elif m.role == "tool":
            tool_pos += 1
            name = m.name or (calls[tool_pos - 1].name if tool_pos <= len(calls) else None)
            if not name:
                raise ChatFormatError(
                    "a tool result has no tool name and matches no preceding tool call"
                )
            attrs = [("role", "tool"), ("tool", name), ("index", tool_pos)]
            segs += _message(attrs, _text(m.content))
        else:
            raise ChatFormatError(f"unknown message role {m.role!r}")
    if add_generation_prompt:
        segs += _open_tag("message", [("role", "assistant")])
        segs += _open_tag("think" if thinking else "response")
    return segs


class XTMLFormat(ChatFormat):
    """K3's native format: tools and thinking channels are part of the markup."""

    supports_tools = True
    native_tools = True
    supports_thinking = True

    def __init__(self, tok: Tokenizer) -> None:
        ids = {t: tok.token_to_id(t) for t in XTML_TOKENS}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ChatFormatError(f"tokenizer {tok.name} lacks the XTML tokens {missing}")
        self.tok = tok
        self.open_id, self.close_id = ids[OPEN], ids[CLOSE]
        self.sep_id, self.end_id = ids[SEP], ids[END_OF_MSG]

    def encode_segments(self, segments: list[Segment]) -> list[int]:
        """Each segment BPE-encoded on its own, then concatenated (§4.2 tokenization rule)."""
        out: list[int] = []
        for text, markup in segments:
            out += self.tok.encode(text, allow_special=markup)
        return out

    def encode(
        self,
        messages: list[Message],
        *,
        tools: list[dict] | None = None,
        thinking: bool = False,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        segs = render_segments(
            messages, tools=tools, thinking=thinking, add_generation_prompt=add_generation_prompt
        )
        return self.encode_segments(segs)

    def stop_token_ids(self) -> list[int]:
        return list(dict.fromkeys([self.end_id, *self.tok.eos_token_ids]))

    def new_parser(self, *, thinking: bool) -> XTMLParser:
        return XTMLParser(self, thinking=thinking)


def _typed_value(text: str, kind: str) -> Any:
    """An argument's value from its text and ``type`` attribute; ValueError when they disagree."""
    if kind not in _JSON_TYPES:
        return text
    value = json.loads(text)
    ok = {
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }[kind]
    if not ok:
        raise ValueError(f"{text[:40]!r} is not a JSON {kind}")
    return value


class XTMLParser(StreamParser):
    """Parses the assistant's continuation of ``<|open|>think<|sep|>`` / ``…response<|sep|>``.

    ``section`` is where content tokens go: ``think`` and ``response`` stream out as deltas,
    ``argument``/``json`` collect a tool-call value, ``between``/``tools``/``call`` hold markup
    whitespace (stray text between sections is shown as text; inside ``tools`` it is dropped).
    """

    def __init__(self, fmt: XTMLFormat, *, thinking: bool) -> None:
        self.fmt, self.tok = fmt, fmt.tok
        self.section = "think" if thinking else "response"
        self.done = False
        self._dec = StreamingDecoder(self.tok)
        self._header: list[int] | None = None
        self._closing = False
        self._value: list[int] = []
        self._arg: tuple[str, str] | None = None
        self._call: ToolCall | None = None
        self._ncalls = 0

    def feed(self, token_id: int) -> list[ParsedEvent]:
        if self.done:
            return []
        f = self.fmt
        if token_id in (f.open_id, f.close_id):
            out = self._flush_text()
            self._header, self._closing = [], token_id == f.close_id
            return out
        if token_id == f.sep_id:
            if self._header is None:
                return []
            header = self.tok.decode(self._header)
            closing, self._header = self._closing, None
            return self._close(header.strip()) if closing else self._open(header)
        if token_id == f.end_id:
            out = self.finish()
            self.done = True
            return out
        if self._header is not None:
            self._header.append(token_id)
            if len(self._header) > _MAX_HEADER_TOKENS:
                self._header = None
            return []
        if self.tok.is_special(token_id):
            return []
        if self.section in ("argument", "json"):
            self._value.append(token_id)
            return []
        return self._text(self._dec.feed(token_id))

    def finish(self) -> list[ParsedEvent]:
        out = self._flush_text()
        self._header = None
        if self._call is not None:
            call, self._call, self._arg = self._call, None, None
            call.arguments, call.error = {}, "unterminated tool call"
            out.append(ToolCallParsed(call))
            self.section = "between"
        return out

    def _text(self, text: str) -> list[ParsedEvent]:
        if not text:
            return []
        if self.section == "think":
            return [ThinkingDelta(text)]
        if self.section == "response" or (self.section == "between" and text.strip()):
            return [TextDelta(text)]
        return []

    def _flush_text(self) -> list[ParsedEvent]:
        return self._text(self._dec.flush())

    def _open(self, header: str) -> list[ParsedEvent]:
        tag = header.split(maxsplit=1)[0] if header.strip() else ""
        attrs = {k: unescape_attr(v) for k, v in _ATTR_RE.findall(header)}
        if tag in ("think", "response", "tools"):
            self.section = tag
        elif tag == "call":
            out = self.finish() if self._call is not None else []
            self._ncalls += 1
            index = attrs.get("index", "")
            self._call = ToolCall(
                name=attrs.get("tool", ""),
                arguments={},
                index=int(index) if index.isdigit() else self._ncalls,
            )
            self.section = "call"
            return out
        elif tag in ("argument", "json") and self._call is not None:
            self._arg = (attrs.get("key", ""), attrs.get("type", "string"))
            self._value, self.section = [], tag
        return []

    def _close(self, tag: str) -> list[ParsedEvent]:
        call = self._call
        if tag in ("argument", "json") and call is not None and self.section == tag:
            self._store_value(call, tag)
            self.section = "call"
        elif tag == "call" and call is not None:
            if self.section in ("argument", "json"):
                self._store_value(call, self.section)
            self._call, self.section = None, "tools"
            if call.error:
                call.arguments = {}
            return [ToolCallParsed(call)]
        elif tag in ("think", "response", "tools"):
            self.section = "between"
        elif tag == "message":
            self.done = True
            return self.finish()
        return []

    def _store_value(self, call: ToolCall, tag: str) -> None:
        text = self.tok.decode(self._value)
        key, kind = self._arg or ("", "string")
        self._value, self._arg = [], None
        try:
            if tag == "json":
                value = json.loads(text)
                if not isinstance(value, dict):
                    raise ValueError("not a JSON object")
                call.arguments.update(value)
            else:
                call.arguments[key] = _typed_value(text, kind)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            what = "arguments" if tag == "json" else f"argument {key!r} ({kind})"
            call.error = call.error or f"invalid {what}: {e}"
