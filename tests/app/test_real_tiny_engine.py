import threading

import pytest
import torch  # noqa: E402

import k3chat_model.engine as engine_mod  # noqa: E402
import k3chat_model.testing as testing  # noqa: E402
from k3chat.conversation import Conversation
from k3chat.session import SessionStore
from k3chat_model.events import SamplingParams, Stats, TextDelta


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    torch.set_num_threads(2)
    return testing.make_checkpoint(tmp_path_factory.mktemp("ck"), preset="k3-tiny", seed=0)


@pytest.mark.slow
def test_real_engine_turn_cancel_and_resume_with_snapshot(tmp_path, tiny_ckpt):
    eng = engine_mod.Engine.load(tiny_ckpt)
    store = SessionStore(tmp_path / "s")
    s = store.create(name=None, model_id=eng.model_id, config_hash=eng.config_hash, cwd="/w")
    sp = SamplingParams(temperature=0.0, max_tokens=6)
    c = Conversation(eng, s, sampling=sp, system="be brief")
    list(c.send("hello"))
    cancel = threading.Event()
    for ev in c.send("more", cancel=cancel):
        if isinstance(ev, TextDelta):
            cancel.set()
    assert s.events()[-1]["status"] == "interrupted"
    assert (s.state_dir / "cache.safetensors").exists() or any(s.state_dir.iterdir())

    eng2 = engine_mod.Engine.load(tiny_ckpt)
    r = Conversation.resume(eng2, store.open(s.id), sampling=sp)
    assert [m.content for m in r.messages] == [m.content for m in c.messages]
    assert eng2.cached_tokens > 0  # the snapshot was loaded
    stats = [e for e in r.send("third") if isinstance(e, Stats)][-1]
    assert stats.prefilled_tokens < stats.prompt_tokens
