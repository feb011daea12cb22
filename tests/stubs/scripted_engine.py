"""ScriptedEngine: the Engine API with scripted replies that go through the real K3 chat format.

The model's *choices* are scripted, everything else is real: each scripted assistant turn is
rendered to XTML token ids by the real `XTMLFormat` with a real (tiny) tiktoken tokenizer,
and those ids are fed one by one through the real incremental `XTMLParser`, so the app sees
exactly the `TextDelta` / `ThinkingDelta` / `ToolCallParsed` stream a K3 checkpoint that
produced those tokens would give. Prompts are also really rendered (tool declarations
included) and kept in `prompts`, so tests can check what the model was shown.

Script entries:
  - `str`: a plain text answer.
  - `Message(role="assistant", content, thinking, tool_calls)`: rendered by the encoder.
  - `Raw(xtml)`: the reply spelled out as XTML markup (`<|open|>call …`), for malformed
    output the encoder would never produce (bad JSON, an unterminated call).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from k3chat_model.chat_formats.xtml import XTMLFormat
from k3chat_model.events import (
    Message,
    PrefillProgress,
    SamplingParams,
    Stats,
    ToolCall,
    ToolCallParsed,
)
from k3chat_model.testing_tokenizer import write_test_tokenizer
from k3chat_model.tokenizer import load_tokenizer


@dataclass
class Raw:
    """A reply given as XTML text; bracket tokens in it are encoded as special ids."""

    xtml: str


def reply(content: str = "", *calls: ToolCall, thinking: str | None = None) -> Message:
    """An assistant turn; calls get 1-based indexes in order when they have none set."""
    numbered = [
        ToolCall(c.name, c.arguments, index=i, id=c.id) if c.index == 1 else c
        for i, c in enumerate(calls, start=1)
    ]
    return Message("assistant", content, thinking=thinking, tool_calls=numbered)


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


@lru_cache(maxsize=1)
def _format() -> XTMLFormat:
    d = Path(tempfile.mkdtemp(prefix="k3-scripted-tok-"))
    write_test_tokenizer(d)
    return XTMLFormat(load_tokenizer(d))


class ScriptedEngine:
    """Engine stand-in whose output tokens come from a script (see module docstring)."""

    def __init__(
        self,
        script: list[str | Message | Raw],
        *,
        context_length: int = 32768,
        delay: float = 0.0,
        model_id: str = "scripted-k3",
        config_hash: str = "scripted-hash",
    ) -> None:
        self.fmt = _format()
        self.tok = self.fmt.tok
        self.script = list(script)
        self.context_length = context_length
        self.delay = delay
        self.model_id, self.config_hash = model_id, config_hash
        self.quantization = None
        self.supports_tools = True
        self.supports_thinking = True
        self.default_sampling = SamplingParams(temperature=0.0)
        self.prompts: list[str] = []
        """Each prompt as the model saw it (decoded ids, markup included)."""
        self.reply_ids: list[list[int]] = []
        """The token ids of each scripted reply, as fed to the parser."""
        self._cached = 0

    # -- tokens --------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tok.encode(text))

    def render(self, messages, tools=None, thinking=False) -> list[int]:
        return self.fmt.encode(messages, tools=tools, thinking=thinking)

    def count_message_tokens(self, messages, tools=None, thinking=False) -> int:
        return len(self.render(messages, tools, thinking))

    def _reply_ids(self, prompt: list[int], messages, tools, thinking) -> list[int]:
        turn = self.script.pop(0) if self.script else "(script exhausted)"
        if isinstance(turn, Raw):
            return self.tok.encode(turn.xtml, allow_special=True)
        msg = Message("assistant", turn) if isinstance(turn, str) else turn
        full = self.fmt.encode(
            [*messages, msg], tools=tools, thinking=thinking, add_generation_prompt=False
        )
        if full[: len(prompt)] != prompt:
            raise AssertionError("the rendered reply does not continue the generation prompt")
        return full[len(prompt) :]

    # -- generation ----------------------------------------------------------------------
    def generate(
        self,
        messages,
        *,
        tools=None,
        sampling=None,
        thinking=False,
        cancel=None,
        on_prefill_progress=None,
    ):
        prompt = self.render(messages, tools, thinking)
        self.prompts.append(self.tok.decode(prompt))
        t0 = time.perf_counter()
        if on_prefill_progress:
            on_prefill_progress(len(prompt), len(prompt))
        yield PrefillProgress(len(prompt), len(prompt))
        ids = self._reply_ids(prompt, messages, tools, thinking)
        self.reply_ids.append(ids)
        stops = set(self.fmt.stop_token_ids())
        parser = self.fmt.new_parser(thinking=thinking)
        produced, finish, saw_tool = 0, "length", False
        t1 = time.perf_counter()
        for tok in ids:
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            if self.delay:
                time.sleep(self.delay)
            produced += 1
            if tok in stops:
                finish = "stop"
                break
            for ev in parser.feed(tok):
                saw_tool |= isinstance(ev, ToolCallParsed)
                yield ev
        else:
            finish = "stop"  # a Raw reply may end without the end-of-message token
        for ev in parser.finish():
            saw_tool |= isinstance(ev, ToolCallParsed)
            yield ev
        if finish == "stop" and saw_tool:
            finish = "tool_calls"
        self._cached = len(prompt) + produced
        yield Stats(
            len(prompt),
            len(prompt),
            produced,
            t1 - t0,
            time.perf_counter() - t1,
            finish,
            context_tokens=self._cached,
        )

    # -- state ---------------------------------------------------------------------------
    @property
    def cached_tokens(self) -> int:
        return self._cached

    def reset(self) -> None:
        self._cached = 0

    def save_state(self, directory) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "state.json").write_text(json.dumps({"hash": self.config_hash, "n": self._cached}))

    def load_state(self, directory) -> bool:
        f = Path(directory) / "state.json"
        if not f.exists():
            return False
        self._cached = json.loads(f.read_text())["n"]
        return True

    def memory_report(self) -> dict[str, int]:
        return {"weights": 0, "cache_ram": 0, "cache_disk": 0}
