import json
import shutil
from pathlib import Path

from stubs.fake_engine import FakeEngine

from k3chat.conversation import Conversation
from k3chat.session import SessionStore
from k3chat.session_migrations import MIGRATIONS
from k3chat_model.events import SamplingParams

FIXTURE = Path(__file__).parent / "fixtures" / "session_v0"


def test_v1_session_dir_migrates_and_resumes(tmp_path):
    root = tmp_path / "sessions"
    shutil.copytree(FIXTURE, root)
    store = SessionStore(root)
    s = store.open("20250101")
    meta = json.loads(s.meta_path.read_text())
    assert meta["migrations"] == [m.__name__ for m in MIGRATIONS]
    assert meta["title"] == "What is a delta rule?"
    assert meta["created"] == "2025-01-01T00:00:00.000Z"
    assert meta["messages"] == 3
    c = Conversation.resume(FakeEngine(), s, sampling=SamplingParams())
    # the torn last line (a reply cut by a crash) is skipped, reported, and repaired
    assert any("torn" in w for w in c.warnings)
    assert [m.role for m in c.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert c.messages[-1].content == ""
    list(c.send("next"))
    assert store.list()[0].title == "What is a delta rule?"
