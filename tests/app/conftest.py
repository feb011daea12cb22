import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    # no test may read or write the user's real config or sessions
    monkeypatch.setenv("K3CHAT_HOME", str(tmp_path / "k3home"))
    monkeypatch.delenv("K3CHAT_SESSIONS_DIR", raising=False)
    for var in list(__import__("os").environ):
        if var.startswith("K3CHAT_") and var not in ("K3CHAT_HOME",):
            monkeypatch.delenv(var, raising=False)
    yield
