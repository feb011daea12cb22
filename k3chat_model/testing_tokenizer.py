"""A tiny but real Kimi-style tiktoken tokenizer for test checkpoints.

:func:`write_test_tokenizer` writes ``tiktoken.model`` (256 byte tokens, then BPE merges learned
from :data:`CORPUS`, in rank order) and a ``tokenizer_config.json`` whose 256 special tokens sit
at ``num_base…num_base+255`` in exactly K3's layout (research/k3-architecture.md §4.1), shifted
down from 163,584. So tests exercise the same files, loader and chat markup as the real model,
only with a 1k vocabulary. Output is byte-for-byte deterministic.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

from k3chat_model.tokenizer import KIMI_PAT_STR, NUM_KIMI_SPECIAL

K3_SPECIALS = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|end_of_msg|>",
    3: "<|open|>",
    4: "<|close|>",
    5: "<|sep|>",
    9: "[EOT]",
    18: "<|media_begin|>",
    19: "<|media_content|>",
    20: "<|media_end|>",
    21: "<|media_pad|>",
    254: "[UNK]",
    255: "[PAD]",
}
"""Offset from the first special id → token, as in K3's 163584… table (163593 [EOT] unverified)."""

# secondary fixtures mark the XTML brackets special:false and the rest special:true (§4.1)
_NOT_SPECIAL_FLAG = {"<|open|>", "<|close|>", "<|sep|>"}

CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model can still learn to chat: it reads
the question, thinks about it, and answers in plain words. Hello world! How are you today?
I am fine, thank you. What is the weather like in Paris? It is sunny and warm, about 24 degrees.
Please write a short summary of the following text and keep the important numbers.
The user asked for a list of files in the current directory, so the assistant called a tool.
Tools return results; the assistant reads them and then writes the final answer for the user.
When the answer is not known, say so. Never invent facts. Thinking first often helps.

def read_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()

class Tokenizer:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        return [self.vocab[t] for t in text.split()]

for i in range(10):
    if i % 2 == 0:
        print(f"even {i}")
    else:
        print("odd", i, sep=", ")

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3}}
{"type": "function", "function": {"name": "list_files", "parameters": {"type": "object"}}}

你好，世界！今天天气很好，我们去公园散步吧。
人工智能模型可以回答问题，也可以调用工具来完成任务。
请用中文写一段简短的总结，并保留重要的数字和名字。
这个模型很小，但是它的分词器是真实的。
"""
"""Training text: English prose, Python, JSON and Chinese, so every script gets some merges."""


def _pretokens(text: str) -> list[bytes]:
    import regex  # a tiktoken dependency; V1 mode understands the pattern's `&&`

    return [m.encode("utf-8") for m in regex.findall(KIMI_PAT_STR, text, flags=regex.V1)]


@lru_cache(maxsize=8)
def learn_ranks(num_base: int) -> tuple[bytes, ...]:
    """Token bytes in rank order: 256 single bytes, then ``num_base-256`` merges from CORPUS.

    Greedy BPE: merge the most frequent adjacent pair (ties: smallest bytes first).

    Raises:
        ValueError: ``num_base`` is below 256 or above what CORPUS can support.
    """
    if num_base < 256:
        raise ValueError(f"num_base={num_base} must be >= 256 (the byte tokens)")
    tokens: list[bytes] = [bytes([b]) for b in range(256)]
    known = set(tokens)
    words = Counter(tuple(bytes([b]) for b in w) for w in _pretokens(CORPUS))
    while len(tokens) < num_base:
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:], strict=False):
                pairs[(a, b)] += n
        if not pairs:
            raise ValueError(
                f"num_base={num_base} exceeds the {len(tokens)} tokens CORPUS supports"
            )
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merged = best[0] + best[1]
        if merged not in known:
            known.add(merged)
            tokens.append(merged)
        words = Counter({_merge(w, best, merged): n for w, n in words.items()})
    return tuple(tokens)


def _merge(word: tuple[bytes, ...], pair: tuple[bytes, bytes], merged: bytes) -> tuple[bytes, ...]:
    out: list[bytes] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def special_token_names(num_base: int) -> dict[int, str]:
    """Id → token for the 256 specials, reserved slots named ``<|reserved_token_{id}|>``."""
    return {
        num_base + k: K3_SPECIALS.get(k, f"<|reserved_token_{num_base + k}|>")
        for k in range(NUM_KIMI_SPECIAL)
    }


def write_test_tokenizer(model_dir: Path, num_base: int = 768) -> int:
    """Write ``tiktoken.model`` + ``tokenizer_config.json`` into ``model_dir``.

    Args:
        model_dir (Path):
            Checkpoint directory (created if missing).
        num_base (int):
            Base BPE ranks (256 bytes + learned merges). Default: `768`.
    Returns:
        The total vocabulary size, ``num_base + 256``.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    ranks = learn_ranks(num_base)
    lines = [f"{base64.b64encode(t).decode('ascii')} {r}" for r, t in enumerate(ranks)]
    (model_dir / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="ascii")
    added = {
        str(i): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": name not in _NOT_SPECIAL_FLAG,
        }
        for i, name in special_token_names(num_base).items()
    }
    config = {
        "added_tokens_decoder": added,
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "model_max_length": 1048576,
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
    }
    (model_dir / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return num_base + NUM_KIMI_SPECIAL
