import threading

import pytest
import torch

from k3chat_model.engine import Engine
from k3chat_model.errors import ModelNotFound, StateMismatch
from k3chat_model.events import Message, SamplingParams, Stats, TextDelta

GREEDY = SamplingParams(temperature=0, repetition_penalty=1.0, max_tokens=12)


@pytest.fixture(params=["k3-tiny", "kimi-linear-tiny"])
def engine(request, tiny_checkpoints):
    return Engine.load(tiny_checkpoints[request.param], dtype="float32")


def _reply(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_engine_greedy_tokens_match_naive_generate(engine):
    msgs = [Message("user", "Tell me a story about a cat.")]
    ids = engine.render(msgs)
    expected = engine.model.generate_naive(torch.tensor([ids]), 8)[0, len(ids) :].tolist()
    engine.generate(msgs, sampling=GREEDY)  # generator not consumed: nothing happens
    got = []
    engine.reset()
    logits, _ = engine.prefill(ids)
    for _ in range(8):
        tok = int(logits.argmax())
        got.append(tok)
        logits = engine._forward([tok])
        engine._ids.append(tok)
    assert got == expected


def test_second_turn_reuses_cache_and_matches_a_fresh_engine(engine, tiny_checkpoints):
    msgs = [Message("user", "Hello there")]
    first = list(engine.generate(msgs, sampling=GREEDY))
    msgs += [Message("assistant", _reply(first)), Message("user", "Go on please")]
    second = list(engine.generate(msgs, sampling=GREEDY))
    stats = second[-1]
    assert isinstance(stats, Stats) and stats.prefilled_tokens < stats.prompt_tokens
    fresh = Engine.load(engine.model_dir, dtype="float32")
    assert _reply(list(fresh.generate(msgs, sampling=GREEDY))) == _reply(second)


def test_generation_after_load_state_equals_uninterrupted_run(engine, tmp_path):
    msgs = [Message("user", "Remember the number 42.")]
    list(engine.generate(msgs, sampling=GREEDY))
    engine.save_state(tmp_path / "state")
    nxt = engine._ids + engine.tokenizer.encode(" and more words")
    uninterrupted, _ = engine.prefill(nxt)
    other = Engine.load(engine.model_dir, dtype="float32")
    assert other.load_state(tmp_path / "state")
    resumed, computed = other.prefill(nxt)
    assert computed == len(engine.tokenizer.encode(" and more words"))
    err = ((resumed - uninterrupted).norm() / uninterrupted.norm()).item()
    assert err <= 1e-5


def test_snapshot_from_another_model_is_refused(tiny_checkpoints, tmp_path):
    a = Engine.load(tiny_checkpoints["k3-tiny"], dtype="float32")
    list(a.generate([Message("user", "hi")], sampling=GREEDY))
    a.save_state(tmp_path / "s")
    b = Engine.load(tiny_checkpoints["kimi-linear-tiny"], dtype="float32")
    with pytest.raises(StateMismatch):
        b.load_state(tmp_path / "s")
    assert not b.load_state(tmp_path / "absent")


def test_cancel_mid_decode_keeps_cache_consistent_then_continue(engine):
    cancel = threading.Event()
    msgs = [Message("user", "Count to twenty")]
    events = []
    sp = SamplingParams(temperature=0, repetition_penalty=1.0, max_tokens=200)
    for ev in engine.generate(msgs, sampling=sp, cancel=cancel):
        events.append(ev)
        if sum(isinstance(e, TextDelta) for e in events) == 3:
            cancel.set()
    assert events[-1].finish_reason == "cancelled"
    assert engine.cache.seen == engine.cached_tokens
    msgs += [Message("assistant", _reply(events)), Message("user", "continue")]
    out = list(engine.generate(msgs, sampling=GREEDY))
    fresh = Engine.load(engine.model_dir, dtype="float32")
    assert _reply(out) == _reply(list(fresh.generate(msgs, sampling=GREEDY)))


def test_sampling_with_seed_is_reproducible(engine):
    sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, seed=7, max_tokens=10)
    msgs = [Message("user", "Pick random words")]
    a = _reply(list(engine.generate(msgs, sampling=sp)))
    engine.reset()
    assert _reply(list(engine.generate(msgs, sampling=sp))) == a


def test_unknown_model_gives_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="unknown model"):
        Engine.load("no-such-model")
    with pytest.raises(ModelNotFound, match="config.json"):
        Engine.load(tmp_path)
