import io
import random
import subprocess
import sys

import pytest
from clihelp import k3env
from stubs.fake_engine import FakeEngine

from k3chat import documents
from k3chat.errors import InputError
from k3chat_model.events import SamplingParams


def _paras(n, seed=0):
    rnd = random.Random(seed)
    return [" ".join(f"w{rnd.randint(0, 99)}" for _ in range(rnd.randint(5, 60))) for _ in range(n)]


def test_chunks_end_on_paragraph_boundaries_and_keep_every_word():
    eng = FakeEngine()
    paras = _paras(200)
    out = list(documents.chunks(eng, paras, 300))
    assert all(eng.count_tokens(c) <= 300 for c in out)
    assert "\n\n".join(out) == "\n\n".join(paras)
    assert len(out) > 5


def test_oversized_paragraph_is_split_not_dropped():
    eng = FakeEngine()
    big = " ".join(f"x{i}" for i in range(1000))
    out = list(documents.chunks(eng, ["intro", big, "outro"], 128))
    assert all(eng.count_tokens(c) <= 128 for c in out)
    assert " ".join(" ".join(out).split()) == " ".join(["intro", big, "outro"])


def test_reader_bounds_a_paragraph_without_breaks():
    stats = documents.ReadStats()
    data = ("word " * 100_000).encode()
    r = documents.TextReader(io.BytesIO(data), max_para_chars=1000, stats=stats)
    paras = list(r.paragraphs())
    assert max(len(p) for p in paras) <= 1000
    assert sum(len(p.split()) for p in paras) == 100_000


def test_document_that_fits_is_sent_whole():
    eng = FakeEngine(context_length=4096)
    text = "\n\n".join(_paras(20))
    msg, st = documents.prepare(
        eng, io.BytesIO(text.encode()), "list risks", SamplingParams(max_tokens=256)
    )
    assert st.parts == 0 and text in msg and msg.endswith("list risks")
    assert st.tokens == eng.count_tokens(text)


def test_long_document_is_map_reduced_with_exact_count():
    eng = FakeEngine(context_length=1024)
    paras = _paras(600)
    text = "\n\n".join(paras)
    parts = []
    msg, st = documents.prepare(
        eng,
        io.BytesIO(text.encode()),
        "list risks",
        SamplingParams(max_tokens=128),
        on_part=lambda n, read: parts.append(n),
    )
    assert st.tokens == eng.count_tokens(text)
    assert st.parts == len(parts) > 10
    assert f"({st.tokens} tokens)" in msg and f"{st.parts} parts" in msg
    assert eng.count_tokens(msg) + 128 < 1024


def test_nul_bytes_mean_binary():
    with pytest.raises(InputError, match="binary"):
        documents.prepare(FakeEngine(), io.BytesIO(b"abc\x00def"), "x", SamplingParams())


def _rss_run(tmp_path, words):
    doc = tmp_path / f"doc{words}.txt"
    rnd = random.Random(1)
    with open(doc, "w") as f:
        n = 0
        while n < words:
            k = min(rnd.randint(20, 120), words - n)
            f.write(" ".join("risk" if rnd.random() < 0.1 else "text" for _ in range(k)) + "\n\n")
            n += k
    code = (
        "import resource, subprocess, sys\n"
        f"r = subprocess.run([sys.executable, '-m', 'k3chat', '-p', 'list the risks'], "
        f"stdin=open({str(doc)!r}, 'rb'), capture_output=True)\n"
        "sys.stderr.write(r.stderr.decode())\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=k3env(tmp_path / "h"),
        cwd=tmp_path,
        timeout=120,
    )
    rc, rss_kb = map(int, r.stdout.split())
    return rc, rss_kb, r.stderr


def test_200k_token_pipe_completes_in_bounded_memory(tmp_path):
    rc, rss_small, err = _rss_run(tmp_path, 200_000)
    assert rc == 0, err
    assert "200000 tokens" in err and "nothing dropped" in err
    rc, rss_big, err = _rss_run(tmp_path, 2_000_000)
    assert rc == 0 and "2000000 tokens" in err
    # ten times the input (11 MB more text) must not grow memory with it
    assert rss_big - rss_small < 8_000, (rss_small, rss_big)
