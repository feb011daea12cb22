"""Chat formats given by a Jinja ``chat_template`` (ChatML for k3-smol, Kimi Linear, GGUF models).

The template is rendered like Hugging Face's ``apply_chat_template`` (sandboxed, ``trim_blocks``,
``lstrip_blocks``, ``tojson``, ``raise_exception``) and the text encoded with specials allowed.

Tools: a template that mentions ``tools`` gets them natively. One that does not (SmolLM2's
ChatML) still supports tools through a small built-in convention, Hermes style:

- the declaration is appended to the system message (one is added when there is none);
- past calls are appended to the assistant's content as ``<tool_call>{json}</tool_call>``;
- tool results are sent as user messages wrapped in ``<tool_response>…</tool_response>``.

The reply parser streams text, splits ``<think>…</think>`` off as thinking and returns each
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` as a tool call. It holds back only a
tail that could still grow into one of those tags.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from k3chat_model.chat_formats.base import ChatFormat, ChatFormatError, ParsedEvent, StreamParser
from k3chat_model.errors import TokenizerError
from k3chat_model.events import Message, TextDelta, ThinkingDelta, ToolCall, ToolCallParsed
from k3chat_model.tokenizer import StreamingDecoder, Tokenizer

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_TAGS = (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE)
_EXTRA_STOPS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>")

BUILTIN_TOOLS_PROMPT = (
    "# Tools\n\n"
    "You can call the functions below. Their signatures, as JSON Schema, are inside "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, reply with one JSON object per call inside <tool_call></tool_call> "
    "tags:\n<tool_call>\n"
    '{{"name": "<function-name>", "arguments": {{<arguments as a JSON object>}}}}\n'
    "</tool_call>"
)
"""System-prompt text that declares tools to a template without tool support."""


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **kw: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, **kw)


def _raise(message: str) -> None:
    raise ChatFormatError(f"chat template refused the conversation: {message}")


def _call_json(call: ToolCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


class JinjaFormat(ChatFormat):
    """A chat format rendered by the model's own Jinja ``chat_template``."""

    supports_tools = True

    def __init__(self, tok: Tokenizer, template: str) -> None:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(template)
        except TemplateError as e:
            raise TokenizerError(f"the chat_template of {tok.name} does not parse: {e}") from e
        self.tok = tok
        self.native_tools = "tools" in template
        self.supports_thinking = any(
            s in template for s in (THINK_OPEN, "enable_thinking", "reasoning_content")
        )
        self._bos = tok.id_to_token(tok.bos_token_id) if tok.bos_token_id is not None else ""
        self._eos = tok.id_to_token(tok.eos_token_ids[0]) if tok.eos_token_ids else ""
        probe = [Message(role="user", content="x")]
        self._prompt_opens_think = self.supports_thinking and self.render(
            probe, thinking=True
        ).rstrip().endswith(THINK_OPEN)

    def _to_dicts(self, messages: list[Message], tools: list[dict] | None) -> list[dict]:
        out: list[dict] = []
        for m in messages:
            d: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.name and m.role != "tool":
                d["name"] = m.name
            if m.thinking and self.supports_thinking:
                d["reasoning_content"] = m.thinking
            if m.tool_calls and self.native_tools:
                d["tool_calls"] = [
                    {
                        "id": c.id or f"call_{c.index}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ]
            elif m.tool_calls:
                calls = "\n".join(
                    f"{CALL_OPEN}\n{_call_json(c)}\n{CALL_CLOSE}" for c in m.tool_calls
                )
                d["content"] = f"{m.content}\n{calls}" if m.content else calls
            if m.role == "tool" and self.native_tools:
                d["name"] = m.name or ""
                d["tool_call_id"] = f"call_{m.tool_index or 1}"
            elif m.role == "tool":
                d = {"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"}
            out.append(d)
        if tools and not self.native_tools:
            decl = BUILTIN_TOOLS_PROMPT.format(
                tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
            )
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{decl}"}
            else:
                out.insert(0, {"role": "system", "content": decl})
        return out

    def render(
        self,
        messages: list[Message],
        *,
        tools: list[dict] | None = None,
        thinking: bool = False,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt as text (specials spelled out).

        Raises:
            ChatFormatError: the template raised or failed on this conversation.
        """
        from jinja2 import TemplateError

        try:
            return self._template.render(
                messages=self._to_dicts(messages, tools),
                tools=tools if (tools and self.native_tools) else None,
                add_generation_prompt=add_generation_prompt,
                enable_thinking=thinking,
                bos_token=self._bos,
                eos_token=self._eos,
            )
        except ChatFormatError:
            raise
        except (TemplateError, TypeError, KeyError, ValueError) as e:
            raise ChatFormatError(f"chat template failed to render: {e}") from e

    def encode(
        self,
        messages: list[Message],
        *,
        tools: list[dict] | None = None,
        thinking: bool = False,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        text = self.render(
            messages, tools=tools, thinking=thinking, add_generation_prompt=add_generation_prompt
        )
        return self.tok.encode(text, allow_special=True)

    def stop_token_ids(self) -> list[int]:
        extra = [self.tok.token_to_id(t) for t in _EXTRA_STOPS]
        return list(dict.fromkeys([*self.tok.eos_token_ids, *(i for i in extra if i is not None)]))

    def new_parser(self, *, thinking: bool) -> TaggedParser:
        return TaggedParser(self.tok, in_think=thinking and self._prompt_opens_think)


def _held_tail(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some tag."""
    for n in range(min(len(text), max(map(len, _TAGS)) - 1), 0, -1):
        if any(t.startswith(text[-n:]) for t in _TAGS):
            return n
    return 0


def parse_call_json(body: str, index: int) -> ToolCall:
    """A Hermes ``{"name": …, "arguments": {…}}`` body → ToolCall (``error`` set when malformed)."""
    name = ""
    try:
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise ValueError("expected an object with a string 'name'")
        name = data["name"]
        args = data.get("arguments", data.get("parameters", {}))
        if isinstance(args, str):
            args = json.loads(args)
        if not isinstance(args, dict):
            raise ValueError("'arguments' is not a JSON object")
        return ToolCall(name=name, arguments=args, index=index)
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        return ToolCall(name=name, arguments={}, index=index, error=f"invalid tool call: {e}")


class TaggedParser(StreamParser):
    """Text-level parser for ``<think>`` and ``<tool_call>`` tags in a template model's reply."""

    def __init__(self, tok: Tokenizer, *, in_think: bool = False) -> None:
        self.tok = tok
        self._dec = StreamingDecoder(tok)
        self.state = "think" if in_think else "text"
        self._pending = ""
        self._call = ""
        self._ncalls = 0
        self._strip_lead = in_think

    def feed(self, token_id: int) -> list[ParsedEvent]:
        if self.tok.is_special(token_id):
            token = self.tok.id_to_token(token_id)
            if token not in _TAGS:
                return []
            self._pending += self._dec.flush() + token
        else:
            self._pending += self._dec.feed(token_id)
        return self._drain(final=False)

    def finish(self) -> list[ParsedEvent]:
        self._pending += self._dec.flush()
        out = self._drain(final=True)
        if self.state == "call":
            self._ncalls += 1
            call = parse_call_json(self._call.strip(), self._ncalls) if self._call.strip() else None
            name = call.name if call else ""
            out.append(
                ToolCallParsed(
                    ToolCall(
                        name=name, arguments={}, index=self._ncalls, error="unterminated tool call"
                    )
                )
            )
            self.state, self._call = "text", ""
        return out

    def _emit(self, text: str) -> list[ParsedEvent]:
        if self._strip_lead:
            text = text.lstrip("\n")
            self._strip_lead = not text
        if not text:
            return []
        if self.state == "think":
            return [ThinkingDelta(text)]
        if self.state == "call":
            self._call += text
            return []
        return [TextDelta(text)]

    def _drain(self, *, final: bool) -> list[ParsedEvent]:
        out: list[ParsedEvent] = []
        while self._pending:
            hits = [(self._pending.find(t), t) for t in _TAGS]
            hits = [(pos, t) for pos, t in hits if pos >= 0]
            if not hits:
                keep = 0 if final else _held_tail(self._pending)
                text, self._pending = (
                    self._pending[: len(self._pending) - keep],
                    self._pending[len(self._pending) - keep :],
                )
                out += self._emit(text)
                break
            pos, tag = min(hits)
            out += self._emit(self._pending[:pos])
            self._pending = self._pending[pos + len(tag) :]
            out += self._on_tag(tag)
        return out

    def _on_tag(self, tag: str) -> list[ParsedEvent]:
        if tag == THINK_OPEN and self.state == "text":
            self.state, self._strip_lead = "think", True
        elif tag == THINK_CLOSE and self.state == "think":
            self.state, self._strip_lead = "text", True
        elif tag == CALL_OPEN and self.state != "call":
            self.state, self._call = "call", ""
        elif tag == CALL_CLOSE and self.state == "call":
            self._ncalls += 1
            call = parse_call_json(self._call.strip(), self._ncalls)
            self.state, self._call, self._strip_lead = "text", "", True
            return [ToolCallParsed(call)]
        return []
