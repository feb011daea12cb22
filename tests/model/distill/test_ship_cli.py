"""Shipping refuses ungated or smaller deltas; the CLI reports bad runs as one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from k3chat_model.delta import write_delta
from k3chat_model.distill.cli import main
from k3chat_model.distill.ship import DELTA_FILE, MANIFEST_FILE, ship
from k3chat_model.errors import CheckpointError


def _run(tmp: Path, name: str, layers: list[int], passed: bool) -> Path:
    run = tmp / name
    t = {
        f"language_model.model.layers.{i}.self_attn.q_proj.weight": torch.randn(8, 8)
        for i in layers
    }
    man = write_delta(t, run / "delta" / "d.safetensors", kda_layers=layers, replace_prefixes=[])
    keys = {"chat": {}, "assistant": {}, "factual_correct": 30, "max_phrase_repeats": 1}
    (run / "gate.json").write_text(json.dumps({**keys, "passed": passed, "delta": man}))
    return run


def test_ship_only_gated_deltas_with_more_layers(tmp_path: Path) -> None:
    dest = tmp_path / "deltas"
    with pytest.raises(CheckpointError, match="did not pass"):
        ship(_run(tmp_path, "failed", [1, 2], passed=False), dest)
    assert not dest.exists()
    ship(_run(tmp_path, "eight", [1, 2], passed=True), dest)
    man = json.loads((dest / MANIFEST_FILE).read_text())
    assert man["kda_layers"] == [2, 3] and man["gate"]["passed"] and (dest / DELTA_FILE).exists()
    with pytest.raises(CheckpointError, match="already has 2"):
        ship(_run(tmp_path, "same", [4, 5], passed=True), dest)
    ship(_run(tmp_path, "more", [1, 2, 3], passed=True), dest)
    assert json.loads((dest / MANIFEST_FILE).read_text())["kda_layers"] == [2, 3, 4]


def test_ship_refuses_a_delta_changed_after_gating(tmp_path: Path) -> None:
    run = _run(tmp_path, "r", [1], passed=True)
    with open(run / "delta" / "d.safetensors", "ab") as f:
        f.write(b"x")
    with pytest.raises(CheckpointError, match="changed since"):
        ship(run, tmp_path / "deltas")


def test_cli_status_of_a_missing_run_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["status", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("k3chat: error:")
        and "not a distillation run" in err
        and err.count("\n") == 1
    )


def _stage2_run(tmp: Path) -> Path:
    from k3chat_model.distill import ckpt

    run = tmp / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"teacher": "t", "data_dir": "d"}))
    st = {"done": ["data", "stage1", "rank", "stage1b", "stage2"], "chosen": [1]}
    (run / "state.json").write_text(json.dumps({**st, "stage2_tokens": 300}))
    for tokens in (100, 300):
        saved = {
            "layers": {1: {"w": torch.full((2,), float(tokens))}},
            "opt": {"state": {}},
            "state": {"step": tokens // 10, "tokens": tokens, "done": True},
        }
        ckpt.save_atomic(saved, run / ("stage2.pt" if tokens == 300 else "early.pt"))
    return run


def test_rewind_makes_a_kept_checkpoint_current_and_keeps_the_replaced_one(
    tmp_path: Path, capsys
) -> None:
    run = _stage2_run(tmp_path)
    assert main(["rewind", str(run), str(run / "early.pt")]) == 0
    now = torch.load(run / "stage2.pt", weights_only=False)
    assert now["state"]["tokens"] == 100 and float(now["layers"][1]["w"][0]) == 100
    kept = torch.load(run / "stage2-300.pt", weights_only=False)
    assert float(kept["layers"][1]["w"][0]) == 300  # the replaced checkpoint is not lost
    st = json.loads((run / "state.json").read_text())
    assert st["stage2_tokens"] == 100 and "stage2" in st["done"]  # a larger budget reopens it
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["stage2_tokens"] == 100


def test_rewind_refuses_a_foreign_or_torn_checkpoint(tmp_path: Path, capsys) -> None:
    run = _stage2_run(tmp_path)
    other = torch.load(run / "early.pt", weights_only=False)
    other["layers"] = {2: other["layers"][1]}
    torch.save(other, tmp_path / "other.pt")
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 not really")
    for bad, why in (("other.pt", "holds KDA layers [2]"), ("torn.pt", "not a readable")):
        assert main(["rewind", str(run), str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
    assert torch.load(run / "stage2.pt", weights_only=False)["state"]["tokens"] == 300
    assert json.loads((run / "state.json").read_text())["stage2_tokens"] == 300


def test_gating_a_run_with_no_trained_layers_is_a_clear_error(tmp_path: Path) -> None:
    from k3chat_model.distill.gate import export_delta

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"teacher": "t", "data_dir": "d"}))
    with pytest.raises(CheckpointError, match="no trained KDA layers"):
        export_delta(run)
    (run / "state.json").write_text(json.dumps({"done": ["data", "stage1", "rank"], "chosen": [1]}))
    with pytest.raises(CheckpointError, match="no trained KDA layers"):
        export_delta(run)
