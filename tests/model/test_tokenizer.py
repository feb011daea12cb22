from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizer_helpers import write_chatml_tokenizer

from k3chat_model.errors import TokenizerError
from k3chat_model.testing_tokenizer import write_test_tokenizer
from k3chat_model.tokenizer import (
    HFTokenizer,
    StreamingDecoder,
    TiktokenTokenizer,
    Tokenizer,
    load_tokenizer,
)

TEXTS = [
    "Hello world",
    "你好世界，今天天气很好。",
    "emoji 😀👍🏽 and flags 🇫🇷 mixed with 中文 and code: def f(x): return x**2\n",
    "  leading spaces\n\n\ttabs and CRLF\r\n",
    "",
]


@pytest.fixture(scope="module")
def kimi(kimi_tok_dir: Path) -> Tokenizer:
    return load_tokenizer(kimi_tok_dir)


@pytest.fixture(scope="module")
def chatml(chatml_dir: Path) -> Tokenizer:
    return load_tokenizer(chatml_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_tiktoken_round_trips_chinese_emoji_and_code(kimi: Tokenizer, text: str) -> None:
    assert kimi.decode(kimi.encode(text)) == text


def test_tiktoken_learned_merges_make_common_words_single_tokens(kimi: Tokenizer) -> None:
    ids = kimi.encode("The quick brown fox")
    assert [kimi.id_to_token(i) for i in ids] == ["The", " quick", " brown", " fox"]


def test_han_runs_are_split_from_latin_by_the_pre_tokenizer(kimi: Tokenizer) -> None:
    ids = kimi.encode("world世界")
    ends = {sum(len(kimi.token_bytes(i)) for i in ids[: n + 1]) for n in range(len(ids))}
    assert len(b"world") in ends  # a token boundary where the Han run starts


def test_special_layout_matches_k3_table_offset_shifted(kimi: Tokenizer) -> None:
    base = 768
    expected = {
        "[BOS]": base,
        "[EOS]": base + 1,
        "<|end_of_msg|>": base + 2,
        "<|open|>": base + 3,
        "<|close|>": base + 4,
        "<|sep|>": base + 5,
        "[EOT]": base + 9,
        "<|media_begin|>": base + 18,
        "<|media_pad|>": base + 21,
        "[UNK]": base + 254,
        "[PAD]": base + 255,
        f"<|reserved_token_{base + 6}|>": base + 6,
    }
    assert {t: kimi.token_to_id(t) for t in expected} == expected
    assert kimi.vocab_size == base + 256
    assert kimi.bos_token_id == base
    assert kimi.eos_token_ids == [base + 1, base + 2]  # [EOS], then config.json's <|end_of_msg|>
    assert kimi.is_special(base + 3) and not kimi.is_special(base - 1)


def test_special_strings_are_text_unless_allowed(kimi: Tokenizer) -> None:
    text = "a<|open|>b"
    plain = kimi.encode(text)
    assert 771 not in plain and kimi.decode(plain) == text
    marked = kimi.encode(text, allow_special=True)
    assert 771 in marked
    assert kimi.decode(marked, skip_special=True) == "ab"


def test_write_test_tokenizer_is_deterministic(tmp_path: Path) -> None:
    assert write_test_tokenizer(tmp_path / "a") == 1024
    assert write_test_tokenizer(tmp_path / "b") == 1024
    for name in ("tiktoken.model", "tokenizer_config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert write_test_tokenizer(tmp_path / "c", num_base=300) == 556
    assert load_tokenizer(tmp_path / "c").token_to_id("<|sep|>") == 305


def _stream(tok: Tokenizer, ids: list[int], **kw: bool) -> list[str]:
    dec = StreamingDecoder(tok, **kw)
    return [dec.feed(i) for i in ids] + [dec.flush()]


def test_streaming_decoder_holds_back_partial_characters(kimi: Tokenizer) -> None:
    ids = kimi.encode("😀")
    assert len(ids) > 1  # a 4-byte char over several byte tokens
    pieces = _stream(kimi, ids)
    assert pieces[:-2] == [""] * (len(ids) - 1)
    assert "".join(pieces) == "😀"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_streaming_decoder_never_yields_broken_utf8(kimi_tok_dir: Path, text: str) -> None:
    tok = load_tokenizer(kimi_tok_dir)
    pieces = _stream(tok, tok.encode(text))
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == text


@pytest.mark.parametrize("text", TEXTS)
def test_hf_streaming_matches_full_decode(chatml: Tokenizer, text: str) -> None:
    pieces = _stream(chatml, chatml.encode(text))
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == text


def test_streaming_decoder_skips_specials_when_asked(kimi: Tokenizer) -> None:
    ids = kimi.encode("hi<|open|>yo", allow_special=True)
    assert "".join(_stream(kimi, ids, skip_special=True)) == "hiyo"
    assert "".join(_stream(kimi, ids)) == "hi<|open|>yo"


def test_hf_tokenizer_reads_eos_and_respects_specials(chatml: Tokenizer) -> None:
    assert isinstance(chatml, HFTokenizer)
    im_end = chatml.token_to_id("<|im_end|>")
    assert chatml.eos_token_ids == [im_end]
    assert chatml.bos_token_id == chatml.token_to_id("<|im_start|>")
    assert chatml.encode("x<|im_end|>", allow_special=True)[-1] == im_end
    plain = chatml.encode("x<|im_end|>")
    assert im_end not in plain and chatml.decode(plain) == "x<|im_end|>"
    assert chatml.is_special(im_end)
    assert (
        chatml.decode(chatml.encode("a<|im_end|>b", allow_special=True), skip_special=True) == "ab"
    )


def test_generation_config_eos_ids_are_added(tmp_path: Path) -> None:
    d = write_chatml_tokenizer(tmp_path / "t")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    assert load_tokenizer(d).eos_token_ids == [2, 0]


def _write_gguf(src: Path, path: Path) -> None:
    import gguf

    model = json.loads((src / "tokenizer.json").read_text())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges([" ".join(m) for m in model["merges"]])
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{{ messages[0]['content'] }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_vocab_encodes_like_the_tokenizer_it_came_from(
    chatml_dir: Path, tmp_path: Path
) -> None:
    _write_gguf(chatml_dir, tmp_path / "model.gguf")
    tok = load_tokenizer(tmp_path)
    ref = load_tokenizer(chatml_dir)
    text = "Hello world! <|im_start|>user\nhi<|im_end|> 你好"
    assert tok.encode(text, allow_special=True) == ref.encode(text, allow_special=True)
    assert tok.eos_token_ids == [2] and tok.bos_token_id == 1
    assert tok.chat_template == "{{ messages[0]['content'] }}"


def test_missing_tokenizer_names_the_expected_files(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="tiktoken.model, tokenizer.json or a .gguf"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("tiktoken.model", b"not base64 at all!\n", "tiktoken.model line 1"),
        ("tiktoken.model", b"", "tiktoken.model holds no tokens"),
        ("tokenizer_config.json", b"{broken", "tokenizer_config.json is not readable JSON"),
    ],
)
def test_damaged_tiktoken_files_raise_tokenizer_error(
    kimi_tok_dir: Path, tmp_path: Path, name: str, content: bytes, match: str
) -> None:
    d = tmp_path / "tok"
    shutil.copytree(kimi_tok_dir, d)
    (d / name).write_bytes(content)
    with pytest.raises(TokenizerError, match=match):
        TiktokenTokenizer(d)


def test_damaged_tokenizer_json_and_gguf_raise_tokenizer_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tokenizer.json").write_text('{"model": 3}')
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "model.gguf").write_bytes(b"GGUF garbage")
    with pytest.raises(TokenizerError, match="model.gguf"):
        load_tokenizer(tmp_path / "b")
