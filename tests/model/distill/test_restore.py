"""`distill restore`: a trained hybrid with some KDA layers given back to softmax attention is a
new run whose delta holds exactly the kept layers' trained weights; the source is untouched."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from distill_helpers import trained_run

from k3chat_model.distill.cli import main
from k3chat_model.distill.gate import export_delta
from k3chat_model.distill.pipeline import load_hybrid
from k3chat_model.loading import load_model


def _run(tmp: Path, teacher_dir: Path) -> tuple[Path, dict]:
    run = tmp / "run"
    return run, trained_run(run, teacher_dir, [1, 2], keep=[1])


def test_restored_run_keeps_the_other_layers_trained_weights(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    run, sds = _run(tmp_path, teacher_dir)
    before = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}
    new = tmp_path / "new"
    assert main(["restore", str(run), str(new), "--layers", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["kda_layers"] == [2]
    st = json.loads((new / "state.json").read_text())
    assert st["chosen"] == [2] and st["restored"]["layers"] == [1]
    cfg = json.loads((new / "config.json").read_text())
    assert cfg["n_layers"] == 1 and cfg["keep_layers"] == []
    students, student = load_hybrid(new, teacher_dir, st["chosen"], "stage2.pt")
    assert sorted(students) == [2]
    for k, v in sds[2].items():
        assert torch.equal(students[2].state_dict()[k], v)
    teacher = load_model(teacher_dir, dtype=torch.bfloat16)  # layer 1 is the teacher's again
    assert (
        student.model.layers[1].self_attn.__class__ is teacher.model.layers[1].self_attn.__class__
    )
    _, manifest = export_delta(new)
    assert manifest["kda_layers"] == [3]  # 1-based, as in the checkpoint config
    assert (new / "data" / "rows.pt").read_bytes() == b"rows"
    assert before == {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}


def test_bad_restores_are_one_line_errors(teacher_dir: Path, tmp_path: Path, capsys) -> None:
    run, _ = _run(tmp_path, teacher_dir)
    cases = [
        (["--layers", "5"], "not KDA there"),
        (["--layers", "1,2"], "no KDA layer"),
        (["--layers", "x"], "comma-separated"),
    ]
    for extra, why in cases:
        assert main(["restore", str(run), str(tmp_path / "new"), *extra]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
        assert not (tmp_path / "new").exists()
    (tmp_path / "new").mkdir()
    assert main(["restore", str(run), str(tmp_path / "new"), "--layers", "1"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_malformed_layer_lists_are_one_line_errors_and_make_no_run(tmp_path: Path, capsys) -> None:
    """Every distill flag that takes a layer list shares one parser: a typo in `run --keep` is a
    one-line error before a new run directory is created, not a traceback after."""
    for argv in (
        ["run", str(tmp_path / "new"), "--keep", "5,x"],
        ["run", str(tmp_path / "new"), "--candidates", "4;22"],
        ["timed", str(tmp_path / "new"), "--device", "cpu", "--seconds", "1",
         "--pretrained-train", "24,a"],
    ):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "expected comma-separated layer numbers" in err and err.count("\n") == 1
        assert not (tmp_path / "new").exists()


def test_a_run_stopped_after_stage1b_restores_to_one_stopped_there(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    run, sds = _run(tmp_path, teacher_dir)
    (run / "stage2.pt").rename(run / "stage1b.pt")  # `run --until stage1b`
    st = json.loads((run / "state.json").read_text())
    st["done"].remove("stage2")
    st["pretrained"] = [1, 2]
    (run / "state.json").write_text(json.dumps(st))
    new = tmp_path / "new"
    assert main(["restore", str(run), str(new), "--layers", "2"]) == 0
    capsys.readouterr()
    assert not (new / "stage2.pt").exists()  # stage 2 stays to do
    assert json.loads((new / "state.json").read_text())["pretrained"] == [1]
    students, _ = load_hybrid(new, teacher_dir, [1], "stage1b.pt")
    for k, v in sds[1].items():
        assert torch.equal(students[1].state_dict()[k], v)
    _, manifest = export_delta(new)
    assert manifest["kda_layers"] == [2] and manifest["tokens"]["stage2_tokens"] == 0
