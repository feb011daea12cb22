"""Pick and build the chat format of a checkpoint; re-exports the chat format API.

A tokenizer with K3's XTML bracket tokens gets :class:`XTMLFormat`, the format the model was
trained on, even when a Jinja template is also shipped (a GGUF converter may embed an
approximation). Otherwise the tokenizer's ``chat_template`` drives a :class:`JinjaFormat`.
"""

from __future__ import annotations

from pathlib import Path

from k3chat_model.chat_formats.base import (
    ChatFormat,
    ChatFormatError,
    ParsedEvent,
    StreamParser,
    parsed_text,
)
from k3chat_model.chat_formats.jinja import JinjaFormat, TaggedParser
from k3chat_model.chat_formats.xtml import XTML_TOKENS, XTMLFormat, XTMLParser, render_segments
from k3chat_model.errors import TokenizerError
from k3chat_model.tokenizer import Tokenizer

__all__ = [
    "ChatFormat",
    "ChatFormatError",
    "JinjaFormat",
    "ParsedEvent",
    "StreamParser",
    "TaggedParser",
    "XTMLFormat",
    "XTMLParser",
    "load_chat_format",
    "parsed_text",
    "render_segments",
]


def load_chat_format(model_dir: Path, tokenizer: Tokenizer, config: dict) -> ChatFormat:
    """The chat format for a checkpoint.

    Args:
        model_dir (Path):
            Checkpoint directory (named in errors).
        tokenizer (Tokenizer):
            Its tokenizer, from ``load_tokenizer``; it carries any ``chat_template`` found.
        config (dict):
            The parsed config.json. A ``"chat_format": "xtml" | "jinja"`` entry forces a choice.
    Raises:
        TokenizerError: neither XTML tokens nor a chat template are available.
    """
    forced = config.get("chat_format") if isinstance(config, dict) else None
    has_xtml = all(tokenizer.token_to_id(t) is not None for t in XTML_TOKENS)
    if forced == "xtml" or (forced is None and has_xtml):
        return XTMLFormat(tokenizer)
    if tokenizer.chat_template:
        return JinjaFormat(tokenizer, tokenizer.chat_template)
    raise TokenizerError(
        f"no chat format for {Path(model_dir).name}: the tokenizer has no XTML tokens and no "
        "chat_template (tokenizer_config.json, chat_template.jinja or GGUF metadata)"
    )
