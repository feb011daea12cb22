"""`distill restore RUN NEW --layers L`: the run's hybrid with some KDA layers put back to the
teacher's softmax attention, as a new run that `gate` and `ship` take like any other.

Why: when a milestone stalls just short of the gate, the layers that cost most after joint
training (`distill attribute --selection`) can be given back. The result has fewer KDA layers
than the run but may have more than the shipped delta, and then it may ship. The other layers
keep their jointly trained weights; nothing is retrained, and the source run is not touched.
A run stopped after stage 1b gives a run stopped after stage 1b: one grown by two layers at
once can then be priced (`attribute`) and gated as every 12-layer hybrid it contains.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path

from ..errors import CheckpointError, ConfigError
from . import ckpt
from .pipeline import load_run


def restore_layers(run: Path, new: Path, layers: list[int]) -> dict:
    """Write `new` with `layers` (0-based) no longer KDA; returns its state."""
    cfg, st = load_run(run)
    chosen = st.get("chosen")
    src = ckpt.latest_layers_file(run)
    saved = ckpt.load(run / src)
    if not chosen or saved is None:
        raise CheckpointError(f"{run}: no stage-2 or stage-1b KDA layers to restore from",
                              hint="`distill run` it until stage 1b has finished")  # fmt: skip
    unknown = sorted(set(layers) - set(chosen))
    if unknown:
        raise ConfigError(f"{run}: layers {unknown} are not KDA there",
                          hint=f"its KDA layers (0-based): {chosen}")  # fmt: skip
    keep = [i for i in chosen if i not in layers]
    if not keep:
        raise ConfigError(f"{run}: restoring {sorted(layers)} would leave no KDA layer")
    if new.exists():
        raise ConfigError(f"{new} already exists", hint="name a new run directory")
    work = new.with_name(f".{new.name}.partial")  # renamed into place when complete
    shutil.rmtree(work, ignore_errors=True)  # left by an interrupted restore
    work.mkdir(parents=True)
    shutil.copytree(run / "data", work / "data", copy_function=_link_or_copy)
    kept_cfg = replace(
        cfg, n_layers=len(keep), keep_layers=[i for i in cfg.keep_layers or [] if i in keep]
    )
    ckpt.write_json(work / "config.json", asdict(kept_cfg))
    state = {**st, "chosen": keep, "restored": {"from": str(run), "layers": sorted(layers)}}
    if "pretrained" in st:  # a restored layer no longer takes stage 2's pretrained LR scale
        state["pretrained"] = [i for i in st["pretrained"] if i in keep]
    out = {"layers": {i: saved["layers"][i] for i in keep}, "opt": None, "state": saved["state"]}
    if saved.get("experts"):  # routed experts stay: their MLPs are not the restored attention
        out["experts"] = saved["experts"]
    ckpt.save_atomic(out, work / src)  # the same phase: a stage-1b run goes on to stage 2
    ckpt.write_json(work / "state.json", state)
    work.rename(new)
    return state


def _link_or_copy(src: str, dst: str) -> None:
    """Hard links keep the copy free (files here are only ever replaced, never edited)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
