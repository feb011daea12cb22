"""Suite-wide isolation: every test gets its own K3CHAT_HOME; torch stays on ≤ 2 threads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("k3home")
    monkeypatch.setenv("K3CHAT_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.delenv("K3CHAT_SESSIONS_DIR", raising=False)
    yield home


def _torch_threads() -> None:
    import k3chat_model  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads OpenMP)

    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(min(2, os.cpu_count() or 1))


_torch_threads()


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One tiny official-layout checkpoint per preset, written once per test session."""
    from k3chat_model.testing import PRESETS, make_checkpoint

    root = tmp_path_factory.mktemp("ckpt")
    return {name: make_checkpoint(root / name, name, seed=0) for name in PRESETS}


@pytest.fixture
def tiny_k3_checkpoint(tiny_checkpoints, tmp_path) -> Path:
    """A private copy of the k3-tiny checkpoint (tests may damage it)."""
    dst = tmp_path / "k3-tiny"
    shutil.copytree(tiny_checkpoints["k3-tiny"], dst)
    return dst
