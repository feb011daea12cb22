"""Tokenizers: one small interface over Kimi's tiktoken files, HF ``tokenizer.json`` and GGUF vocabs.

K3 ships a tiktoken BPE (``tiktoken.model`` + ``tokenizer_config.json``; research/k3-architecture.md
§4.1): 163,584 base ranks followed by 256 reserved/special ids. The default model and other
checkpoints ship a Hugging Face ``tokenizer.json`` or only a ``.gguf``. The engine and the chat
formats see only :class:`Tokenizer`; :class:`StreamingDecoder` turns a stream of ids into text
without ever splitting a multibyte character.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from k3chat_model.errors import TokenizerError

# Kimi K2's pre-tokenizer (assumed identical for K3, §4.1): Han runs split off on their own, then
# cased words, 1-3 digit groups, punctuation runs and whitespace. `&&` is class intersection.
KIMI_PAT_STR = "|".join(
    [
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

NUM_KIMI_SPECIAL = 256
"""Reserved ids after the base ranks (163,584…163,839 in K3)."""

# tiktoken's Rust BPE recurses on very long runs; upstream splits input the same way.
_MAX_ENCODE_CHARS = 400_000
_MAX_RUN_CHARS = 25_000


class Tokenizer:
    """Text ⇄ token ids for one checkpoint.

    Subclasses fill the attributes below in ``__init__``.
    """

    vocab_size: int
    """Number of ids the tokenizer can produce (base + special)."""
    bos_token_id: int | None = None
    eos_token_ids: list[int]
    """Ids that end generation (from the tokenizer config, generation_config.json, config.json)."""
    chat_template: str | None = None
    """A Jinja chat template shipped with the tokenizer (tokenizer_config.json, .jinja, GGUF)."""
    name: str = ""
    """The file the vocabulary came from, for messages."""

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        """Token ids for ``text``; with ``allow_special=False`` special-token strings are plain text."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """Text for ``ids``; invalid UTF-8 becomes U+FFFD, unknown ids are dropped."""
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        """The id of one vocabulary entry (e.g. ``"<|open|>"``), or None."""
        raise NotImplementedError

    def id_to_token(self, i: int) -> str | None:
        """The vocabulary entry of ``i`` (raw form: specials as text), or None."""
        raise NotImplementedError

    def is_special(self, i: int) -> bool:
        """True for control/reserved ids that ``decode(skip_special=True)`` drops."""
        raise NotImplementedError

    def token_bytes(self, i: int) -> bytes | None:
        """Exact bytes of one token when the tokenizer is byte-level and knows them, else None.

        Lets :class:`StreamingDecoder` decode with an incremental UTF-8 decoder instead of
        re-decoding a window of ids.
        """
        return None


class StreamingDecoder:
    """Turns ids fed one at a time into text, holding back incomplete UTF-8 sequences.

    Byte-level tokenizers that expose :meth:`Tokenizer.token_bytes` go through an incremental
    UTF-8 decoder. Others (SentencePiece-style decoders that change a token's text by its
    neighbours) use the prefix-window method: decode the ids since the last emitted boundary,
    emit only what grew, and wait while the tail is a replacement character.
    """

    def __init__(self, tok: Tokenizer, *, skip_special: bool = False) -> None:
        self.tok = tok
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bytes_mode = type(tok).token_bytes is not Tokenizer.token_bytes
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def feed(self, i: int) -> str:
        """Add one id; return the text that is now complete (possibly "")."""
        if self.skip_special and self.tok.is_special(i):
            return ""
        if self._bytes_mode:
            b = self.tok.token_bytes(i)
            return self._utf8.decode(b) if b is not None else ""
        self._ids.append(i)
        prefix_text = self.tok.decode(self._ids[self._prefix : self._read])
        new_text = self.tok.decode(self._ids[self._prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Return whatever is held back (an incomplete sequence becomes U+FFFD) and reset."""
        out = self._utf8.decode(b"", final=True)
        if self._ids:
            prefix_text = self.tok.decode(self._ids[self._prefix : self._read])
            out += self.tok.decode(self._ids[self._prefix :])[len(prefix_text) :]
        self._utf8.reset()
        self._ids, self._prefix, self._read = [], 0, 0
        return out


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; {} when absent; TokenizerError naming the file when broken."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{path.name} is not readable JSON: {e}") from e
    if not isinstance(data, dict):
        raise TokenizerError(f"{path.name} must hold a JSON object")
    return data


def _token_content(value: Any) -> str | None:
    """``"[EOS]"`` or ``{"content": "[EOS]", ...}`` → ``"[EOS]"``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _as_id_list(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _dedup(ids: list[int]) -> list[int]:
    return list(dict.fromkeys(ids))


def _model_config_ids(model_dir: Path, key: str) -> list[int]:
    """``key`` (bos/eos_token_id) from generation_config.json then config.json (+ text_config)."""
    out: list[int] = []
    for name in ("generation_config.json", "config.json"):
        data = _read_json(model_dir / name)
        out += _as_id_list(data.get(key))
        text_config = data.get("text_config")
        if isinstance(text_config, dict):
            out += _as_id_list(text_config.get(key))
    return out


def _read_chat_template(model_dir: Path, tok_config: dict[str, Any]) -> str | None:
    """chat_template.jinja wins over tokenizer_config.json's ``chat_template`` (HF's order)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerError(f"{jinja.name} is not readable: {e}") from e
    tmpl = tok_config.get("chat_template")
    if isinstance(tmpl, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default") or next(iter(named.values()), None)
    return tmpl if isinstance(tmpl, str) else None


def _split_long_runs(text: str) -> Iterator[str]:
    """Cut ``text`` so no piece has a whitespace/non-whitespace run over _MAX_RUN_CHARS."""
    for start in range(0, len(text), _MAX_ENCODE_CHARS):
        s = text[start : start + _MAX_ENCODE_CHARS]
        run, is_space, cut = 0, s[:1].isspace(), 0
        for j, ch in enumerate(s):
            if ch.isspace() != is_space:
                run, is_space = 1, ch.isspace()
            else:
                run += 1
                if run > _MAX_RUN_CHARS:
                    yield s[cut:j]
                    cut, run = j, 1
        yield s[cut:]


def _load_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """Parse ``base64-token rank`` lines; TokenizerError naming the file on any damage."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise TokenizerError(f"{path.name} is not readable: {e}") from e
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as e:
            raise TokenizerError(f"{path.name} line {n} is not 'base64 rank': {line[:40]!r}") from e
    if not ranks:
        raise TokenizerError(f"{path.name} holds no tokens")
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise TokenizerError(f"{path.name}: ranks are not 0..{len(ranks) - 1} without gaps")
    return ranks


class TiktokenTokenizer(Tokenizer):
    """Kimi-style tiktoken BPE: ``tiktoken.model`` ranks + 256 specials from tokenizer_config.json.

    Specials occupy ids ``num_base … num_base+255``; names missing from ``added_tokens_decoder``
    become ``<|reserved_token_{id}|>`` as in upstream ``tokenization_kimi.py``.
    """

    def __init__(self, model_dir: Path) -> None:
        import tiktoken

        path = model_dir / "tiktoken.model"
        if not path.is_file():
            raise TokenizerError(f"tiktoken.model not found in {model_dir}")
        ranks = _load_tiktoken_ranks(path)
        num_base = len(ranks)
        tok_config = _read_json(model_dir / "tokenizer_config.json")
        names: dict[int, str] = {}
        for key, entry in (tok_config.get("added_tokens_decoder") or {}).items():
            content = _token_content(entry)
            if content is not None and str(key).isdigit():
                names[int(key)] = content
        self.special_tokens = {
            names.get(i, f"<|reserved_token_{i}|>"): i
            for i in range(num_base, num_base + NUM_KIMI_SPECIAL)
        }
        try:
            self._enc = tiktoken.Encoding(
                name=path.name,
                pat_str=KIMI_PAT_STR,
                mergeable_ranks=ranks,
                special_tokens=self.special_tokens,
            )
        except Exception as e:  # tiktoken raises ValueError on inconsistent ranks
            raise TokenizerError(f"{path.name}: tiktoken rejected the vocabulary: {e}") from e
        self.name = path.name
        self.num_base = num_base
        self.vocab_size = num_base + NUM_KIMI_SPECIAL
        self._id_to_special = {i: s for s, i in self.special_tokens.items()}
        bos = self.special_tokens.get(_token_content(tok_config.get("bos_token")) or "[BOS]")
        self.bos_token_id = (
            bos if bos is not None else (_model_config_ids(model_dir, "bos_token_id") or [None])[0]
        )
        eos = [self.special_tokens.get(_token_content(tok_config.get("eos_token")) or "[EOS]")]
        eos += _model_config_ids(model_dir, "eos_token_id")
        self.eos_token_ids = _dedup([i for i in eos if i is not None])
        self.chat_template = _read_chat_template(model_dir, tok_config)

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        out: list[int] = []
        for piece in _split_long_runs(text):
            if allow_special:
                out += self._enc.encode(piece, allowed_special="all")
            else:
                out += self._enc.encode(piece, disallowed_special=())
        return out

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        keep = [
            i for i in ids if 0 <= i < self.vocab_size and not (skip_special and i >= self.num_base)
        ]
        return self._enc.decode(keep, errors="replace")

    def token_to_id(self, token: str) -> int | None:
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            return self._enc.encode_single_token(token.encode("utf-8"))
        except KeyError:
            return None

    def id_to_token(self, i: int) -> str | None:
        b = self.token_bytes(i)
        return None if b is None else b.decode("utf-8", errors="replace")

    def is_special(self, i: int) -> bool:
        return self.num_base <= i < self.vocab_size

    def token_bytes(self, i: int) -> bytes | None:
        if i in self._id_to_special:
            return self._id_to_special[i].encode("utf-8")
        if 0 <= i < self.num_base:
            return self._enc.decode_single_token_bytes(i)
        return None


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (from tokenizer.json or rebuilt from a GGUF vocab).

    Encoding never adds BOS/EOS by itself (``add_special_tokens=False``): chat formats put every
    marker into the prompt explicitly.
    """

    def __init__(
        self,
        tok: Any,
        *,
        name: str,
        bos_token_id: int | None,
        eos_token_ids: list[int],
        chat_template: str | None = None,
    ) -> None:
        from tokenizers import Tokenizer as _HF

        self._tok = tok
        # a clone that splits special-token strings like ordinary text, for content segments
        self._plain = _HF.from_str(tok.to_str())
        self._plain.encode_special_tokens = True
        self.name = name
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self._special = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        self.bos_token_id = bos_token_id
        self.eos_token_ids = _dedup(eos_token_ids)
        self.chat_template = chat_template

    @classmethod
    def from_dir(cls, model_dir: Path) -> HFTokenizer:
        from tokenizers import Tokenizer as _HF

        path = model_dir / "tokenizer.json"
        try:
            tok = _HF.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on bad JSON
            raise TokenizerError(f"tokenizer.json is not a readable tokenizer: {e}") from e
        tok_config = _read_json(model_dir / "tokenizer_config.json")

        def ids_for(key: str) -> list[int]:
            content = _token_content(tok_config.get(f"{key}_token"))
            found = tok.token_to_id(content) if content else None
            return ([found] if found is not None else []) + _model_config_ids(
                model_dir, f"{key}_token_id"
            )

        bos = ids_for("bos")
        return cls(
            tok,
            name=path.name,
            bos_token_id=bos[0] if bos else None,
            eos_token_ids=ids_for("eos"),
            chat_template=_read_chat_template(model_dir, tok_config),
        )

    @classmethod
    def from_gguf(cls, path: Path) -> HFTokenizer:
        from k3chat_model import gguf as _gguf
        from k3chat_model.errors import CheckpointError

        try:
            reader = _gguf.open_gguf(path)
            meta = _gguf.read_metadata(reader, skip_arrays_over=64)
        except CheckpointError as e:
            raise TokenizerError(e.msg, e.hint) from e
        tok = _gguf.hf_tokenizer_from_gguf(reader)
        bos = meta.get("tokenizer.ggml.bos_token_id")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        eot = meta.get("tokenizer.ggml.eot_token_id")
        return cls(
            tok,
            name=path.name,
            bos_token_id=bos,
            eos_token_ids=[i for i in (eos, eot) if isinstance(i, int)],
            chat_template=meta.get("tokenizer.chat_template"),
        )

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        tok = self._tok if allow_special else self._plain
        return tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        keep = [i for i in ids if 0 <= i < self.vocab_size]
        return self._tok.decode(keep, skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        if not 0 <= i < self.vocab_size:
            return None
        if i in self._special:
            return self._tok.id_to_token(i)
        return self._tok.decode([i], skip_special_tokens=False)

    def is_special(self, i: int) -> bool:
        return i in self._special


def load_tokenizer(model_dir: Path) -> Tokenizer:
    """The tokenizer of a checkpoint directory.

    Looks for, in order: ``tiktoken.model`` (Kimi/K3), ``tokenizer.json`` (Hugging Face), a
    ``.gguf`` file (vocab rebuilt by ``k3chat_model.gguf``).

    Raises:
        TokenizerError: none of those files exists, or the one found is unreadable.
    """
    model_dir = Path(model_dir)
    if (model_dir / "tiktoken.model").is_file():
        return TiktokenTokenizer(model_dir)
    if (model_dir / "tokenizer.json").is_file():
        return HFTokenizer.from_dir(model_dir)
    ggufs = sorted(model_dir.glob("*.gguf")) if model_dir.is_dir() else []
    if ggufs:
        return HFTokenizer.from_gguf(ggufs[0])
    raise TokenizerError(
        f"no tokenizer in {model_dir}: expected tiktoken.model, tokenizer.json or a .gguf file"
    )
