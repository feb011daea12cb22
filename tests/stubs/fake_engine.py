"""FakeEngine: a scripted stand-in with the `k3chat_model.engine.Engine` interface.

Used where the real tiny checkpoint cannot give what a test needs: byte-identical replies,
scripted tool calls, a context window of a chosen size, per-token delays for Ctrl-C tests.

Tokens are whitespace-separated words (`count_tokens` is exact for this "tokenizer").
Replies: the next entry of `script` when given (a str, or a list of ToolCall for a tool-calling
turn), otherwise "Answer <n>: " + the first words of the last user message.

`k3chat.cli` builds one when the test-only env var `K3CHAT_FAKE_ENGINE=1` is set; it reads
`K3CHAT_FAKE_CONTEXT` (context length), `K3CHAT_FAKE_DELAY` (seconds per token) and
`K3CHAT_FAKE_REPLY_WORDS` (reply length) and `K3CHAT_FAKE_SCRIPT` (scripted replies, JSON).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path

from k3chat_model.errors import StateMismatch
from k3chat_model.events import (
    Message,
    PrefillProgress,
    SamplingParams,
    Stats,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallParsed,
)


class FakeEngine:
    def __init__(
        self,
        *,
        script: list | None = None,
        context_length: int = 4096,
        delay: float = 0.0,
        reply_words: int = 8,
        config_hash: str = "fake-hash-1",
        model_id: str = "fake",
        think: bool = False,
    ) -> None:
        self.script = list(script) if script else []
        self.context_length = context_length
        self.delay = delay
        self.reply_words = reply_words
        self.config_hash = config_hash
        self.model_id = model_id
        self.quantization = None
        self.supports_tools = True
        self.supports_thinking = True
        self.default_sampling = SamplingParams(temperature=0.0)
        self.think = think
        self.calls: deque[list[Message]] = deque(maxlen=64)
        """The last 64 message lists passed to generate (copies), in order (bounded so
        long-document tests measure the app's memory, not the fake's)."""
        self._cache: list[str] = []
        self.prefilled: deque[int] = deque(maxlen=64)
        """Tokens prefilled per generate call (what the cache did not cover)."""
        self.loaded_state = False
        self._n = 0

    @classmethod
    def from_env(cls) -> FakeEngine:
        # K3CHAT_FAKE_SCRIPT: a JSON list; a string is a reply, a list of
        # {"name", "arguments"} objects is one tool-calling turn
        script = []
        for item in json.loads(os.environ.get("K3CHAT_FAKE_SCRIPT", "[]")):
            if isinstance(item, list):
                item = [
                    ToolCall(c["name"], c.get("arguments", {}), i + 1, f"call_{i + 1}")
                    for i, c in enumerate(item)
                ]
            script.append(item)
        return cls(
            script=script,
            context_length=int(os.environ.get("K3CHAT_FAKE_CONTEXT", "4096")),
            delay=float(os.environ.get("K3CHAT_FAKE_DELAY", "0")),
            reply_words=int(os.environ.get("K3CHAT_FAKE_REPLY_WORDS", "8")),
        )

    # -- tokenizer ---------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _render(self, messages: list[Message], tools=None) -> list[str]:
        toks: list[str] = []
        if tools:
            toks += ["<tools>"] + [t["function"]["name"] for t in tools]
        for m in messages:
            toks.append(f"<{m.role}>")
            if m.thinking:
                toks += m.thinking.split()
            toks += m.content.split()
            for c in m.tool_calls:
                toks += ["<call>", c.name, json.dumps(c.arguments, sort_keys=True)]
            toks.append("<end>")
        toks.append("<assistant>")
        return toks

    def count_message_tokens(self, messages, tools=None, thinking=False) -> int:
        return len(self._render(messages, tools))

    # -- generation --------------------------------------------------------------------
    def _next_reply(self, messages: list[Message]):
        if self.script:
            return self.script.pop(0)
        self._n += 1
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        words = last.split()[: self.reply_words]
        return f"Answer {self._n}: " + " ".join(words)

    def generate(
        self,
        messages: list[Message],
        *,
        tools=None,
        sampling: SamplingParams | None = None,
        thinking: bool = False,
        cancel: threading.Event | None = None,
        on_prefill_progress=None,
    ):
        self.calls.append([Message(**vars(m)) for m in messages])
        prompt = self._render(messages, tools)
        if len(prompt) > self.context_length:
            raise ValueError(f"prompt of {len(prompt)} tokens > context {self.context_length}")
        common = 0
        for a, b in zip(self._cache, prompt, strict=False):
            if a != b:
                break
            common += 1
        todo = len(prompt) - common
        self.prefilled.append(todo)
        yield PrefillProgress(todo, todo)
        if on_prefill_progress:
            on_prefill_progress(todo, todo)
        reply = self._next_reply(messages)
        max_tokens = (sampling or self.default_sampling).max_tokens
        self._cache = list(prompt)
        if thinking and self.think:
            yield ThinkingDelta("thinking about it")
        if isinstance(reply, list):
            for call in reply:
                yield ToolCallParsed(call)
            self._cache += ["<call>"]
            yield Stats(len(prompt), todo, 1, 0.001, 0.001, "tool_calls", len(self._cache))
            return
        words = reply.split(" ")
        n = 0
        finish = "stop"
        for i, w in enumerate(words):
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            if n >= max_tokens:
                finish = "length"
                break
            if self.delay:
                time.sleep(self.delay)
            yield TextDelta(w if i == 0 else " " + w)
            self._cache.append(w)
            n += 1
        yield Stats(len(prompt), todo, n, 0.001, 0.001, finish, len(self._cache))

    # -- state ---------------------------------------------------------------------------
    def save_state(self, dir: Path) -> None:
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        (dir / "fake_state.json").write_text(
            json.dumps({"config_hash": self.config_hash, "tokens": self._cache})
        )

    def load_state(self, dir: Path) -> bool:
        p = Path(dir) / "fake_state.json"
        if not p.exists():
            return False
        data = json.loads(p.read_text())
        if data["config_hash"] != self.config_hash:
            raise StateMismatch("snapshot was made by another model")
        self._cache = data["tokens"]
        self.loaded_state = True
        return True

    def reset(self) -> None:
        self._cache = []

    @property
    def cached_tokens(self) -> int:
        return len(self._cache)

    def memory_report(self) -> dict[str, int]:
        return {"weights": 0, "cache_ram": 8 * len(self._cache), "cache_disk": 0}


def tool_call(name: str, index: int = 1, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, index=index, id=f"call_{index}")
