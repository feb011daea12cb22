"""Put a gate-passing delta into the package (`k3chat_model/deltas/`), never a worse one.

The shipped delta is replaced only by one that passed the gate with more KDA layers; the file
must stay within the 60 MB budget. The manifest (`k3-smol-delta.json`) carries the sha256 the
default build verifies before applying the delta.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..errors import CheckpointError

DELTA_FILE = "k3-smol-delta.safetensors"
from k3chat_model.default_model import DELTA_MANIFEST as MANIFEST_FILE  # noqa: E402

MAX_BYTES = 60_000_000


def shipped_manifest(dest: Path) -> dict | None:
    path = dest / MANIFEST_FILE
    return json.loads(path.read_text()) if path.exists() else None


def ship(run: Path, dest: Path) -> str:
    """Copy the run's gated delta into `dest`; returns a one-line summary.

    Raises:
        CheckpointError: the run has no passing gate report, the delta changed since it was
            gated, it is over budget, or it does not add KDA layers to what is shipped.
    """
    from ..delta import sha256_file

    gate_path = run / "gate.json"
    if not gate_path.exists():
        raise CheckpointError(f"{run}: no gate.json", hint="run `distill gate` first")
    report = json.loads(gate_path.read_text())
    if not report.get("passed"):
        raise CheckpointError(f"{run}: the delta did not pass the gate; nothing shipped")
    manifest = report["delta"]
    src = run / "delta" / manifest["file"]
    if sha256_file(src) != manifest["sha256"]:
        raise CheckpointError(f"{src}: changed since it was gated", hint="run `distill gate` again")
    if manifest["bytes"] > MAX_BYTES:
        raise CheckpointError(
            f"{src}: {manifest['bytes']:,} bytes exceeds the {MAX_BYTES:,}-byte budget"
        )
    old = shipped_manifest(dest)
    if old is not None and len(old["kda_layers"]) >= len(manifest["kda_layers"]):
        raise CheckpointError(
            f"the shipped delta already has {len(old['kda_layers'])} KDA layers; this one has "
            f"{len(manifest['kda_layers'])}: nothing shipped"
        )
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest / DELTA_FILE)
    keys = ("chat", "assistant", "factual_correct", "max_phrase_repeats", "passed")
    out = {**manifest, "file": DELTA_FILE, "gate": {k: report[k] for k in keys}}
    (dest / MANIFEST_FILE).write_text(json.dumps(out, indent=1) + "\n")
    return f"shipped {DELTA_FILE}: {len(manifest['kda_layers'])} KDA layers, sha256 {manifest['sha256'][:16]}…"
