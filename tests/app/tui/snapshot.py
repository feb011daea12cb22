"""A small SVG snapshot check (pytest-textual-snapshot is not a dependency yet).

The SVG Textual exports is a pure function of the screen's cells and styles, so a byte
comparison with the committed file under `__snapshots__/` is the test. Set
`SNAPSHOT_UPDATE=1` to (re)write the files after an intended change; a mismatch
writes `<name>.actual.svg` next to the test's tmp dir so it can be opened in a browser.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.app import App

SNAPSHOT_DIR = Path(__file__).parent / "__snapshots__"


def assert_snapshot(app: App, name: str, tmp_path: Path) -> None:
    svg = app.export_screenshot(title="k3chat")
    path = SNAPSHOT_DIR / f"{name}.svg"
    if os.environ.get("SNAPSHOT_UPDATE") == "1":
        SNAPSHOT_DIR.mkdir(exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}; run with SNAPSHOT_UPDATE=1 to create it")
    if svg != path.read_text(encoding="utf-8"):
        actual = tmp_path / f"{name}.actual.svg"
        actual.write_text(svg, encoding="utf-8")
        pytest.fail(f"screen differs from {path.name}; see {actual}")
