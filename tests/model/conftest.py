"""Tokenizer fixtures: a tiny K3-layout tiktoken dir and a tiny SmolLM2-style ChatML dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_helpers import SMOLLM2_TEMPLATE, write_chatml_tokenizer  # noqa: F401

from k3chat_model.testing_tokenizer import write_test_tokenizer


@pytest.fixture(scope="session")
def kimi_tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kimi_tok")
    write_test_tokenizer(d)
    (d / "config.json").write_text(json.dumps({"model_type": "kimi_k3", "eos_token_id": 770}))
    return d


@pytest.fixture(scope="session")
def chatml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_chatml_tokenizer(tmp_path_factory.mktemp("chatml"))
