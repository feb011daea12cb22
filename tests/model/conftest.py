"""Tokenizer fixtures (a tiny K3-layout tiktoken dir, a tiny SmolLM2-style ChatML dir) and the
CPU bf16 mode switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_helpers import SMOLLM2_TEMPLATE, write_chatml_tokenizer  # noqa: F401

from k3chat_model.layers.linear import MODE_ENV, cpu_bf16_is_slow
from k3chat_model.testing_tokenizer import write_test_tokenizer


@pytest.fixture
def bf16_mode(monkeypatch):
    """Set `K3CHAT_CPU_BF16` (None: unset, so the CPU is detected) and forget the cached
    detection; the cache is cleared again afterwards so later tests detect afresh."""

    def set_mode(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(MODE_ENV, raising=False)
        else:
            monkeypatch.setenv(MODE_ENV, value)
        cpu_bf16_is_slow.cache_clear()

    yield set_mode
    cpu_bf16_is_slow.cache_clear()


@pytest.fixture(scope="session")
def kimi_tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kimi_tok")
    write_test_tokenizer(d)
    (d / "config.json").write_text(json.dumps({"model_type": "kimi_k3", "eos_token_id": 770}))
    return d


@pytest.fixture(scope="session")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_chatml_tokenizer(tmp_path_factory.mktemp("chatml"))
