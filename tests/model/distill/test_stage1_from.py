"""`distill run --stage1-from`: a longer stage 1 of a candidate continues another run's
stage-1 weights for it instead of starting over from the teacher's attention."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from distill_helpers import VOCAB

from k3chat_model.distill import ckpt
from k3chat_model.distill.cli import main
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.pipeline import RunConfig, run_pipeline


def _run_dir(run: Path, teacher_dir: Path, **kw) -> Path:  # noqa: ANN003
    (run / "data").mkdir(parents=True)
    rows = torch.randint(3, VOCAB, (8, 32), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(rows, dtype=torch.uint8)
    torch.save(
        {"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
        run / "data" / "rows.pt",
    )
    cfg = RunConfig(teacher=str(teacher_dir), data_dir=str(run), gen_prompts=0,
                    stage1b_tokens=0, threads=1, **kw)  # fmt: skip
    ckpt.write_json(run / "config.json", asdict(cfg))
    ckpt.write_json(run / "state.json", {"done": ["data"], "teacher_replies": 0})
    return run


def test_stage1_continues_the_other_runs_layer(teacher, teacher_dir: Path, tmp_path: Path) -> None:
    kcfg = kda_config(teacher.config, list(range(4)))
    other = {}
    for i in (2, 3):
        mod = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        with torch.no_grad():
            mod.o_proj.weight.mul_(0.5).add_(float(i))  # unlike anything a fresh init makes
        other[i] = {k: v.clone() for k, v in mod.state_dict().items()}
    (tmp_path / "many").mkdir()
    ckpt.save_atomic({"layers": other, "opt": None, "state": {"tokens": 4096}},
                     tmp_path / "many" / "stage1.pt")  # fmt: skip
    # LR 0: stage 1 moves nothing, so its checkpoint holds the weights it started from
    common = dict(candidates=[1, 3], n_layers=2, stage1_tokens=64, stage1_lr=0.0)
    warm = _run_dir(tmp_path / "warm", teacher_dir, stage1_from=str(tmp_path / "many"), **common)
    cold = _run_dir(tmp_path / "cold", teacher_dir, **common)

    run_pipeline(warm, until="stage1b")
    run_pipeline(cold, until="stage1b")

    w, c = (ckpt.load(r / "stage1.pt")["layers"] for r in (warm, cold))
    assert all(torch.equal(w[3][k], v) for k, v in other[3].items())  # continued
    assert not torch.equal(c[3]["o_proj.weight"], other[3]["o_proj.weight"])
    assert all(torch.equal(w[1][k], c[1][k]) for k in c[1])  # 1 is not in the other run: fresh
    assert "from " + str(tmp_path / "many") in (warm / "events.log").read_text()


def test_a_missing_stage1_from_is_a_one_line_error_before_the_run_is_made(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    run = tmp_path / "new"
    args = ["run", str(run), "--teacher", str(teacher_dir), "--stage1-from", str(tmp_path / "x")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no stage1.pt" in err and err.count("\n") == 1
    assert not run.exists()
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "stage1.pt").write_bytes(b"PK\x03\x04 not really")
    args[-1] = str(tmp_path / "torn")
    assert main(args) == 2
    assert "not a readable checkpoint" in capsys.readouterr().err and not run.exists()
