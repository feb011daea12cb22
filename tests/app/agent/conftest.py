from __future__ import annotations

from pathlib import Path

import pytest

from k3chat.agent import ToolExecutor, Workspace, default_registry


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    (root / "README.md").write_text("# demo\nhello world\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "secret.txt").write_text("top secret\n")
    return d


@pytest.fixture
def make_executor(project: Path, tmp_path: Path):
    def make(mode: str = "yolo", approver=None, **kw) -> ToolExecutor:
        kw.setdefault("session_dir", tmp_path / "session")
        roots = [project, *kw.pop("extra_roots", [])]
        return ToolExecutor(
            default_registry(), Workspace(roots), mode=mode, approver=approver, **kw
        )

    return make
