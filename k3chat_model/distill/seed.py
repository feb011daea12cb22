"""`distill seed RUN`: a run whose hybrid is a delta (by default the shipped one).

Why: training runs live in `runs/`, outside git, and do not outlive the machine they ran on;
the shipped delta does. A seeded run holds the delta's KDA layers as its stage-2 checkpoint
(weights only) with every training phase marked done except `data`, so that
- `distill run SEED --stage2-tokens N` continues the shipped hybrid for N more tokens (fresh
  AdamW, fresh warm-up and cosine), and `timed`, `gate`, `attribute` and `restore` take it;
- `distill run NEW --init-from SEED --keep <its layers> --layers M` grows it: the kept layers
  start stage 2 with the shipped weights and only the new layers go through stage 1.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

from ..config import K3Config
from ..delta import read_delta, sha256_file
from ..errors import CheckpointError, ConfigError
from . import ckpt
from .experts import experts_from_official
from .hybrid import kda_config, layers_from_official
from .pipeline import RunConfig

SEED_PHASES = ["stage1", "rank", "stage1b", "stage2"]


def seed_run(
    run: Path, delta: Path, teacher: Path, data_dir: str, expected_sha256: str | None = None
) -> dict:
    """Write `run` holding `delta`'s KDA layers as a finished stage 2; returns its state."""
    if (run / "config.json").exists():
        raise ConfigError(f"{run} is already a run", hint="name a new run directory")
    meta, tensors = read_delta(delta, expected_sha256)
    chosen = sorted(i - 1 for i in meta["kda_layers"])  # the delta names layers 1-based
    config = kda_config(K3Config.from_file(teacher), chosen)
    try:
        layers = layers_from_official(tensors, config)
    except (RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(
            f"{delta}: its tensors do not fit the teacher's layers ({e})",
            hint="seed from a delta made for this teacher",
        ) from e
    if sorted(layers) != chosen:
        raise CheckpointError(
            f"{delta}: metadata names KDA layers {chosen}, tensors hold {sorted(layers)}"
        )
    work = run.with_name(f".{run.name}.partial")  # renamed into place when complete
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = RunConfig(
        teacher=str(teacher), data_dir=data_dir, n_layers=len(chosen), keep_layers=chosen,
        stage2_tokens=0,
    )  # fmt: skip
    ckpt.write_json(work / "config.json", asdict(cfg))
    state = {"step": 0, "tokens": 0, "cursor": 0, "done": True, "loss": None}
    saved = {"layers": {i: layers[i].state_dict() for i in chosen}, "opt": None, "state": state}
    if experts := experts_from_official(tensors):
        saved["experts"] = experts
    ckpt.save_atomic(saved, work / "stage2.pt")
    st = {
        "done": list(SEED_PHASES),
        "chosen": chosen,
        "stage2_tokens": 0,
        "seeded_from": {
            "delta": str(delta),
            "sha256": sha256_file(delta),
            "tokens": meta["extra"].get("tokens", {}),
        },
    }
    ckpt.write_json(work / "state.json", st)
    work.rename(run)
    return st
