"""Long documents on stdin: exact token counts, one pass when it fits, map-reduce otherwise.

Defined behaviour (also in docs/app.md):

- Input is read in 1 MiB blocks and cut into paragraphs while reading, so memory stays bounded
  by one chunk plus the running summaries, even for inputs of hundreds of MB.
- A NUL byte, or more than 1% of characters being invalid UTF-8, means binary input: `InputError`
  (exit 1). Fewer invalid bytes are replaced with U+FFFD and reported as a warning.
- Empty input (only whitespace) is reported by the caller (see `k3chat.cli`).
- Token counts are exact (`engine.count_tokens`). A document that fits the context (with the
  prompt and room for the answer) is sent whole. A longer one is summarised part by part
  (parts end on paragraph boundaries; an over-long paragraph is split at lines, then words),
  the part summaries are merged hierarchically, and the final answer is written from them.
  Nothing is dropped silently: the caller reports tokens read, parts and merge levels.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any

from k3chat.errors import InputError
from k3chat_model.events import Message, SamplingParams, Stats, TextDelta

BLOCK = 1 << 20
MAX_INVALID_FRACTION = 0.01
_PARA_BREAK = re.compile(r"\n[ \t]*\n")

MAP_SYSTEM = (
    "You summarise one part of a longer document. Keep facts, names, numbers and anything "
    "relevant to the reader's task. Write only the summary."
)
MERGE_SYSTEM = (
    "You merge summaries of consecutive parts of a document into one shorter summary, in "
    "document order, keeping facts relevant to the reader's task. Write only the summary."
)


@dataclass
class ReadStats:
    """What was read; the caller reports it on stderr so nothing is dropped unseen."""

    bytes: int = 0
    chars: int = 0
    replaced: int = 0
    tokens: int = 0
    parts: int = 0
    levels: int = 0
    warnings: list[str] = field(default_factory=list)


class TextReader:
    """Decode a binary stream block by block into paragraphs of bounded size.

    Raises:
        InputError: the input is binary (NUL byte, or > 1% invalid UTF-8).
    """

    def __init__(self, stream: IO[bytes], *, max_para_chars: int, stats: ReadStats) -> None:
        self.stream = stream
        self.max_para_chars = max(64, max_para_chars)
        self.stats = stats
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _decode(self, block: bytes, final: bool) -> str:
        if b"\x00" in block:
            raise InputError(
                "the input looks binary (it contains NUL bytes)",
                hint="k3chat reads UTF-8 text; convert the file first (e.g. pdftotext)",
            )
        text = self._decoder.decode(block, final)
        self.stats.bytes += len(block)
        self.stats.chars += len(text)
        self.stats.replaced += text.count("\ufffd")
        # judge the ratio once there is enough text to judge it
        if self.stats.chars >= 4096 or final:
            if self.stats.replaced > MAX_INVALID_FRACTION * max(self.stats.chars, 1):
                raise InputError(
                    f"the input is not UTF-8 text ({self.stats.replaced} invalid sequences "
                    f"in {self.stats.chars} characters)",
                    hint="convert it first, e.g. `iconv -f latin1 -t utf-8`",
                )
        return text

    def paragraphs(self) -> Iterator[str]:
        buf = ""
        while True:
            block = self.stream.read(BLOCK)
            final = not block
            buf += self._decode(block or b"", final)
            parts = _PARA_BREAK.split(buf)
            buf = parts.pop()
            for p in parts:
                yield from self._bounded(p)
            while len(buf) > self.max_para_chars:
                head, buf = _cut(buf, self.max_para_chars)
                yield head
            if final:
                if buf.strip():
                    yield buf
                return

    def _bounded(self, p: str) -> Iterator[str]:
        while len(p) > self.max_para_chars:
            head, p = _cut(p, self.max_para_chars)
            yield head
        if p.strip():
            yield p


def _cut(text: str, n: int) -> tuple[str, str]:
    """Split before position n at the last line break, else last space, else at n."""
    for sep in ("\n", " "):
        i = text.rfind(sep, n // 2, n)
        if i > 0:
            return text[:i], text[i + 1 :]
    return text[:n], text[n:]


def split_to_fit(engine: Any, text: str, budget: int) -> list[str]:
    """Split `text` into pieces of at most `budget` tokens (lines, then words, then chars)."""
    if engine.count_tokens(text) <= budget:
        return [text]
    for sep in ("\n", " "):
        pieces = text.split(sep)
        if len(pieces) > 1:
            mid = len(pieces) // 2
            left, right = sep.join(pieces[:mid]), sep.join(pieces[mid:])
            return split_to_fit(engine, left, budget) + split_to_fit(engine, right, budget)
    mid = len(text) // 2
    return split_to_fit(engine, text[:mid], budget) + split_to_fit(engine, text[mid:], budget)


def chunks(engine: Any, paragraphs: Iterable[str], budget: int) -> Iterator[str]:
    """Group paragraphs into chunks of at most `budget` tokens (exact, re-counted joined)."""
    cur: list[str] = []
    cur_tokens = 0
    for p in paragraphs:
        n = engine.count_tokens(p)
        if n > budget:
            yield from _flush(engine, cur, budget)
            cur, cur_tokens = [], 0
            yield from split_to_fit(engine, p, budget)
            continue
        # +2 per join: a paragraph break costs about one or two tokens in BPE vocabularies
        if cur and cur_tokens + n + 2 > budget:
            yield from _flush(engine, cur, budget)
            cur, cur_tokens = [], 0
        cur.append(p)
        cur_tokens += n + 2
    yield from _flush(engine, cur, budget)


def _flush(engine: Any, paras: list[str], budget: int) -> Iterator[str]:
    if not paras:
        return
    text = "\n\n".join(paras)
    if engine.count_tokens(text) <= budget or len(paras) == 1:
        yield from split_to_fit(engine, text, budget)
        return
    mid = len(paras) // 2
    yield from _flush(engine, paras[:mid], budget)
    yield from _flush(engine, paras[mid:], budget)


class Summarizer:
    """Map-reduce over a stream of chunks with eager hierarchical merging.

    Summaries are kept per level; when one level's summaries reach the merge budget they are
    merged into one summary one level up, so memory grows with log(document size).
    """

    def __init__(
        self,
        engine: Any,
        task: str,
        sampling: SamplingParams,
        *,
        cancel: threading.Event | None = None,
        on_part: Callable[[int], None] | None = None,
    ) -> None:
        self.engine = engine
        self.task = task
        self.summary_tokens = summary_budget(engine)
        self.sampling = replace(sampling, max_tokens=self.summary_tokens)
        self.cancel = cancel
        self.on_part = on_part
        self.levels: list[list[str]] = []
        self.parts = 0
        overhead = engine.count_message_tokens(
            [Message("system", MERGE_SYSTEM), Message("user", self._merge_prompt([]))]
        )
        self.input_budget = max(32, engine.context_length - overhead - self.summary_tokens - 16)
        """Tokens of document text (or joined summaries) one call may read."""

    def _ask(self, system: str, prompt: str) -> str:
        out = []
        for ev in self.engine.generate(
            [Message("system", system), Message("user", prompt)],
            sampling=self.sampling,
            cancel=self.cancel,
        ):
            if isinstance(ev, TextDelta):
                out.append(ev.text)
            elif isinstance(ev, Stats) and ev.finish_reason == "cancelled":
                raise KeyboardInterrupt
        return "".join(out).strip()

    def _map_prompt(self, chunk: str) -> str:
        return (
            f"Reader's task: {self.task}\n\nPart {self.parts + 1} of the document:\n\n"
            f"{chunk}\n\nSummarise this part."
        )

    def _merge_prompt(self, summaries: list[str]) -> str:
        body = "\n\n".join(f"[{i + 1}] {s}" for i, s in enumerate(summaries))
        return f"Reader's task: {self.task}\n\nSummaries of consecutive parts:\n\n{body}\n\nMerge them."

    def add_chunk(self, chunk: str) -> None:
        summary = self._ask(MAP_SYSTEM, self._map_prompt(chunk))
        self.parts += 1
        self._add(0, summary)
        if self.on_part:
            self.on_part(self.parts)

    def _add(self, level: int, summary: str) -> None:
        while len(self.levels) <= level:
            self.levels.append([])
        items = self.levels[level]
        if items and self._tokens(items + [summary]) > self.input_budget:
            merged = self._ask(MERGE_SYSTEM, self._merge_prompt(items))
            self.levels[level] = []
            self._add(level + 1, merged)
        self.levels[level].append(summary)

    def _tokens(self, summaries: list[str]) -> int:
        return self.engine.count_tokens(self._merge_prompt(summaries))

    def combined(self, budget: int) -> str:
        """All summaries in document order (higher levels cover earlier text), within budget."""
        ordered = [s for level in reversed(self.levels) for s in level]
        while self._tokens(ordered) > budget and len(ordered) > 1:
            merged: list[str] = []
            group: list[str] = []
            for s in ordered:
                if group and self._tokens(group + [s]) > self.input_budget:
                    merged.append(self._ask(MERGE_SYSTEM, self._merge_prompt(group)))
                    group = []
                group.append(s)
            merged.append(self._ask(MERGE_SYSTEM, self._merge_prompt(group)))
            if len(merged) >= len(ordered):
                break
            ordered = merged
        return "\n\n".join(ordered)

    @property
    def depth(self) -> int:
        return len(self.levels)


def summary_budget(engine: Any) -> int:
    """Tokens a part summary may use: an eighth of the context, between 64 and 1024."""
    return max(64, min(1024, engine.context_length // 8))


def document_prompt(document: str, prompt: str) -> str:
    """How a whole document and the user's prompt are put in one message (document first)."""
    return f"<document>\n{document}\n</document>\n\n{prompt}"


def summarized_prompt(summary: str, prompt: str, stats: ReadStats) -> str:
    return (
        f"The document ({stats.tokens} tokens) was too long to read at once, so it was "
        f"summarised in {stats.parts} parts. Summary, in document order:\n\n"
        f"<summary>\n{summary}\n</summary>\n\n{prompt}"
    )


def prepare(
    engine: Any,
    stream: IO[bytes],
    prompt: str,
    sampling: SamplingParams,
    *,
    system: str | None = None,
    cancel: threading.Event | None = None,
    on_part: Callable[[int, int], None] | None = None,
) -> tuple[str, ReadStats]:
    """Read `stream` and return (the user message to send, what was read).

    Raises:
        InputError: binary input.
    """
    stats = ReadStats()
    head = [Message("system", system)] if system else []
    overhead = engine.count_message_tokens(head + [Message("user", document_prompt("", prompt))])
    one_pass = engine.context_length - overhead - sampling.max_tokens
    summarizer = Summarizer(
        engine,
        prompt,
        sampling,
        cancel=cancel,
        on_part=(lambda n: on_part(n, stats.bytes)) if on_part else None,
    )
    reader = TextReader(stream, max_para_chars=summarizer.input_budget * 4, stats=stats)
    held: list[str] = []
    held_tokens = 0
    paras = reader.paragraphs()
    for p in paras:
        n = engine.count_tokens(p)
        stats.tokens += n
        held.append(p)
        held_tokens += n
        if held_tokens > one_pass:
            break
    else:
        document = "\n\n".join(held)
        exact = engine.count_tokens(document)
        stats.tokens = exact
        if exact <= one_pass:
            _report_replaced(stats)
            return document_prompt(document, prompt), stats
    # too long for one pass: map-reduce, continuing to read while summarising

    def counted(it: Iterable[str]) -> Iterator[str]:
        for p in it:
            stats.tokens += engine.count_tokens(p)
            yield p

    def everything() -> Iterator[str]:
        yield from held
        held.clear()
        yield from counted(paras)

    for chunk in chunks(engine, everything(), summarizer.input_budget):
        summarizer.add_chunk(chunk)
    stats.parts = summarizer.parts
    final_budget = one_pass - engine.count_tokens(summarized_prompt("", prompt, stats))
    summary = summarizer.combined(max(summarizer.input_budget // 2, final_budget))
    stats.levels = summarizer.depth
    _report_replaced(stats)
    return summarized_prompt(summary, prompt, stats), stats


def _report_replaced(stats: ReadStats) -> None:
    if stats.replaced:
        stats.warnings.append(
            f"{stats.replaced} invalid UTF-8 sequence(s) were replaced with U+FFFD"
        )
