"""scripts/device_stage2.py: a timed stage-2 result split for the device's size limits comes
back as a run whose checkpoint holds the same (bf16) layers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from k3chat_model.distill import ckpt

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_stage2.py"


def _script():
    spec = importlib.util.spec_from_file_location("device_stage2", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_out_then_take_rebuilds_the_run_with_the_returned_layers(tmp_path: Path) -> None:
    ds = _script()
    run, dev_run, files, new = (tmp_path / n for n in ("run", "dev", "files", "new"))
    for d in (run / "data", dev_run / "data", files):
        d.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"teacher": "t", "data_dir": "d"}))
    (run / "state.json").write_text(json.dumps({"done": ["stage2"], "stage2_tokens": 5}))
    (run / "data" / "rows.pt").write_bytes(b"rows")
    g = torch.Generator().manual_seed(0)
    layers = {i: {"w": torch.randn(3, 4, generator=g), "n": torch.tensor([i])} for i in range(6)}
    state = {"tokens": 905, "done": True}
    experts = {i: {"experts.0.w1.weight": torch.randn(5, 2, generator=g)} for i in (7, 29)}
    ckpt.save_atomic({"layers": layers, "opt": None, "state": state, "experts": experts},
                     dev_run / "stage2-timed.pt")  # fmt: skip
    (dev_run / "timed.json").write_text("{}")
    (dev_run / "data" / "fresh_replies-3.json").write_text('[["q", "r"]]')
    (dev_run / "data" / "val_assistant.json").write_text('[["v", "r"]]')

    ds.out(dev_run, files)
    assert sorted(p.name for p in files.iterdir()) == [
        "experts0.pt", "fresh_replies-3.json", "layers0.pt", "layers1.pt", "state.pt",
        "timed.json", "val_assistant.json",
    ]  # fmt: skip
    ds.take(files, run, new)
    got = ckpt.load(new / "stage2.pt")
    assert got["opt"] is None and got["state"]["tokens"] == 905
    for i, sd in layers.items():
        assert torch.equal(got["layers"][i]["w"], sd["w"].bfloat16().float())
        assert torch.equal(got["layers"][i]["n"], sd["n"])
    for i, sd in experts.items():  # trained routed experts come back too
        assert torch.equal(
            got["experts"][i]["experts.0.w1.weight"], sd["experts.0.w1.weight"].bfloat16().float()
        )
    assert json.loads((new / "state.json").read_text())["stage2_tokens"] == 905
    assert (new / "data" / "rows.pt").read_bytes() == b"rows"
    assert (new / "data" / "fresh_replies-3.json").exists()
    assert (new / "data" / "val_assistant.json").read_text() == '[["v", "r"]]'  # reserved prompts
    assert (run / "state.json").read_text().count("905") == 0  # the source run is untouched


def test_script_names_the_selection_file_as_the_pipeline_does() -> None:
    from k3chat_model.distill.factual_rows import FACTUAL_FILE
    from k3chat_model.distill.pipeline import VALIDATION_FILE
    from k3chat_model.distill.validation import QUIZ_FILE, TOPICS_FILE

    assert _script().VALIDATION_FILE == VALIDATION_FILE
    assert set(_script().MADE_SETS) == {VALIDATION_FILE, TOPICS_FILE, QUIZ_FILE, FACTUAL_FILE}


def test_a_run_stopped_after_stage1b_is_carried_from_its_stage1b_layers(tmp_path: Path) -> None:
    ds = _script()
    layers = {3: {"w": torch.ones(2)}}
    ckpt.save_atomic({"layers": layers, "opt": {"x": 1}, "state": {"done": True}},
                     tmp_path / "stage1b.pt")  # fmt: skip
    got = ds.stage2_start(tmp_path)
    assert got["opt"] is None and got["state"]["tokens"] == 0 and got["state"]["step"] == 0
    assert torch.equal(got["layers"][3]["w"], layers[3]["w"])
    later = {"layers": {3: {"w": torch.zeros(2)}}, "opt": None, "state": {"tokens": 7}}
    ckpt.save_atomic(later, tmp_path / "stage2.pt")
    assert ds.stage2_start(tmp_path)["state"]["tokens"] == 7  # stage 2 under way: its own


def test_pack_passes_extra_timed_arguments_and_rejects_unknown_ones(tmp_path: Path) -> None:
    ds = _script()
    part = tmp_path / "a"
    part.mkdir()
    ds._write_commands(tmp_path, [part], "--train-experts 7,12 --expert-lr-scale 3")
    timed = (tmp_path / "commands.txt").read_text()
    assert "--fresh-replies 0 --train-experts 7,12 --expert-lr-scale 3 > $OUT/timed.log" in timed
    ds._check_timed_args("--train-experts 7,12 --expert-lr-scale 3")
    with pytest.raises(SystemExit, match="does not take"):
        ds._check_timed_args("--expert-scale 3")
    with pytest.raises(SystemExit, match="does not take"):  # unbalanced quote: no traceback
        ds._check_timed_args("--train-experts '7")


def test_pack_carries_the_sets_the_run_has_made(tmp_path: Path) -> None:
    """Sets made here (`prep`) travel, so the device selects on the same text without
    spending its minutes generating it; sets not made are not invented."""
    ds = _script()
    data, run = tmp_path / "wheels", tmp_path / "run"
    data.mkdir()
    (data / "chitchat_dataset-0.9.0-py3-none-any.whl").write_bytes(b"chitchat")
    (run / "data").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"teacher": "-", "data_dir": str(data)}))
    (run / "state.json").write_text("{}")
    (run / "data" / "rows.pt").write_bytes(b"rows")
    (run / "data" / "teacher_replies.json").write_text("[]")
    (run / "data" / "val_topics.json").write_text('[["q", "a"]]')
    (run / "data" / "factual_replies.json").write_text('[["q", "a", true]]')
    ckpt.save_atomic({"layers": {3: {"w": torch.ones(2)}}, "opt": None, "state": {"tokens": 0}},
                     run / "stage2.pt")  # fmt: skip
    wheel = tmp_path / ds.WHEEL
    wheel.write_bytes(b"teacher")
    parts = ds.pack(run, tmp_path / "gpu", wheel, part_mb=60)
    carried = {p.relative_to(d).as_posix() for d in parts for p in d.rglob("*") if p.is_file()}
    assert {"run/data/val_topics.json", "run/data/factual_replies.json"} <= carried
    assert "run/data/val_quiz.json" not in carried
    assert "run/data/val_assistant.json" not in carried
