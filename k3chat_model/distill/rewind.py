"""`distill rewind RUN CKPT`: make an earlier stage-2 checkpoint the run's current one.

Why: the gate's factual count moves by ±2 between neighbouring checkpoints, so a later
continuation may be worse than a kept earlier one (session 3 of issue 7). Rewinding copies the
kept checkpoint back as `stage2.pt` and records its token count as stage 2's, so
`distill run RUN --stage2-tokens N` continues from it with a fresh schedule. The checkpoint it
replaces is kept as `stage2-<tokens>.pt`: nothing trained is lost.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError
from . import ckpt
from .pipeline import _log, load_run


def _read_stage2(path: Path, chosen: list[int]) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        saved = ckpt.load(path)
    except Exception as e:  # noqa: BLE001 - torch raises many types for a bad file
        raise CheckpointError(f"{path}: not a readable checkpoint ({e})") from e
    if not isinstance(saved, dict) or "layers" not in saved or "state" not in saved:
        raise CheckpointError(f"{path}: not a stage-2 checkpoint (no layers or state)")
    if sorted(saved.get("layers", {})) != sorted(chosen):
        raise CheckpointError(
            f"{path}: holds KDA layers {sorted(saved.get('layers', {}))}, "
            f"the run trains {sorted(chosen)}"
        )
    return saved


def rewind_stage2(run: Path, source: Path) -> dict:
    """Make `source` (a stage-2 checkpoint of this run's layers) the current one; returns the
    new state. A finished or mid-run checkpoint both become a finished stage 2 at its tokens."""
    _, st = load_run(run)
    if "chosen" not in st:
        raise CheckpointError(f"{run}: no layers chosen yet, nothing to rewind")
    saved = _read_stage2(source, st["chosen"])
    tokens = int(saved["state"]["tokens"])
    current = run / "stage2.pt"
    if current.resolve() != source.resolve():
        if current.exists():
            try:
                name = f"stage2-{ckpt.load(current)['state']['tokens']}.pt"
            except Exception:  # noqa: BLE001 - an unreadable current checkpoint is still kept
                name = "stage2-unreadable.pt"
            if not (run / name).exists():
                ckpt.copy_atomic(current, run / name)
        saved["state"]["done"] = True
        ckpt.save_atomic(saved, current)
    st["done"] = [p for p in st["done"] if p != "stage2"] + ["stage2"]
    st["stage2_tokens"] = tokens
    st.pop("stage2_reopened_at", None)
    ckpt.write_json(run / "state.json", st)
    _log(run, f"stage 2 rewound to {source.name} ({tokens} tokens)")
    return st
