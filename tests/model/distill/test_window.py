"""Stage 1w (`distill window`): new KDA layers trained to reproduce the stream the layers above
them read in the hybrid they join."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB

from k3chat_model.distill import ckpt
from k3chat_model.distill.cli import main
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.metrics import swapped
from k3chat_model.distill.pipeline import RunConfig
from k3chat_model.distill.stage1 import capture
from k3chat_model.distill.window import (
    WindowConfig,
    train_window,
    window_loss,
    window_points,
    window_run,
)
from k3chat_model.errors import ConfigError


def test_window_points_are_the_span_above_each_new_layer() -> None:
    assert window_points([4], 3, 30) == [5, 6, 7]
    assert window_points([4, 6], 2, 30) == [5, 6, 7, 8]
    assert window_points([27], 6, 30) == [28, 29]  # stops at the top layer
    assert window_points([29], 6, 30) == []


def _layers(teacher, layers: list[int], scale: float = 0.0) -> dict:
    kcfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    out = {}
    for i in layers:
        mod = init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i)
        if scale:
            with torch.no_grad():
                g = torch.Generator().manual_seed(i)
                for p in mod.parameters():
                    p.add_(scale * torch.randn(p.shape, generator=g))
        out[i] = mod
    return out


def _rows(n: int = 8, t: int = 32) -> torch.Tensor:
    return torch.randint(3, VOCAB, (n, t), generator=torch.Generator().manual_seed(0))


def _loss(teacher, students, context, rows, span: int) -> float:
    new = sorted(students)
    points = window_points(new, span, len(teacher.model.layers))
    dtype = teacher.model.embed_tokens.weight.dtype
    with swapped(teacher, context, dtype):
        ref = capture(teacher, rows, points)
        with swapped(teacher, students, dtype):
            got = capture(teacher, rows, points)
    return window_loss(got, ref, points).item()


def test_training_lowers_the_window_loss_and_moves_only_the_new_layer(
    teacher, tmp_path: Path
) -> None:
    context = _layers(teacher, [2], scale=0.02)
    students = _layers(teacher, [1])
    rows = _rows()
    frozen = {k: v.clone() for k, v in teacher.state_dict().items()}
    ctx_before = {k: v.clone() for k, v in context[2].state_dict().items()}
    before = _loss(teacher, students, context, rows, span=2)

    cfg = WindowConfig(tokens=40 * 4 * 32, span=2, lr=3e-3, warmup_steps=2)
    s = train_window(teacher, students, context, rows, cfg, tmp_path / "w.pt")

    after = _loss(teacher, students, context, rows, span=2)
    assert s["done"] and s["tokens"] == 40 * 4 * 32
    assert after < 0.7 * before, (before, after)
    assert all(torch.equal(v, frozen[k]) for k, v in teacher.state_dict().items())
    assert all(torch.equal(v, ctx_before[k]) for k, v in context[2].state_dict().items())
    assert type(teacher.model.layers[1].self_attn).__name__ == "GQAAttention"  # put back


def test_adapted_context_layers_train_while_the_reference_keeps_their_old_weights(
    teacher, tmp_path: Path
) -> None:
    context = _layers(teacher, [2], scale=0.02)
    start = {k: v.clone() for k, v in context[2].state_dict().items()}
    students = _layers(teacher, [1])
    rows = _rows()
    before = _loss(teacher, students, context, rows, span=2)

    cfg = WindowConfig(tokens=40 * 4 * 32, span=2, lr=3e-3, warmup_steps=2, adapt_scale=0.5)
    train_window(teacher, students, context, rows, cfg, tmp_path / "w.pt", adapt=context)

    moved = context[2].state_dict()
    assert not torch.equal(moved["o_proj.weight"], start["o_proj.weight"])
    # scored against the reference with layer 2's starting weights, as training was
    reference = _layers(teacher, [2], scale=0.02)
    assert all(torch.equal(reference[2].state_dict()[k], v) for k, v in start.items())
    adapted = dict(students)
    with swapped(teacher, reference, teacher.model.embed_tokens.weight.dtype):
        ref = capture(teacher, rows, [2, 3])
        with swapped(teacher, adapted | context, teacher.model.embed_tokens.weight.dtype):
            got = capture(teacher, rows, [2, 3])
    assert window_loss(got, ref, [2, 3]).item() < 0.7 * before


def test_an_interrupted_run_resumes_to_the_same_weights(teacher, tmp_path: Path) -> None:
    class StopAfter:
        def __init__(self, n: int) -> None:
            self.n = n

        @property
        def stop(self) -> bool:
            self.n -= 1
            return self.n < 0

    rows = _rows()
    cfg = WindowConfig(tokens=6 * 4 * 32, span=2, lr=3e-3, warmup_steps=2)
    whole = _layers(teacher, [1])
    train_window(teacher, whole, _layers(teacher, [2], 0.02), rows, cfg, tmp_path / "a.pt")

    part = _layers(teacher, [1])
    s = train_window(teacher, part, _layers(teacher, [2], 0.02), rows, cfg, tmp_path / "b.pt",
                     stop=StopAfter(3))  # fmt: skip
    assert not s["done"] and s["step"] == 3
    resumed = _layers(teacher, [1])
    s = train_window(teacher, resumed, _layers(teacher, [2], 0.02), rows, cfg, tmp_path / "b.pt")
    assert s["done"] and s["step"] == 6
    for k, v in whole[1].state_dict().items():
        assert torch.equal(v, resumed[1].state_dict()[k]), k


def _grown_run(teacher, teacher_dir: Path, run: Path) -> Path:
    """A run stopped after stage 1b: layer 2 taken trained from --init-from, layer 1 new."""
    (run / "data").mkdir(parents=True)
    rows = _rows()
    mask = torch.ones_like(rows, dtype=torch.uint8)
    torch.save(
        {"chat": (rows, mask), "assist": (rows.flip(0), mask), "rank": (rows[:2], mask[:2])},
        run / "data" / "rows.pt",
    )
    cfg = RunConfig(teacher=str(teacher_dir), data_dir=str(run), threads=1)
    ckpt.write_json(run / "config.json", asdict(cfg))
    ckpt.write_json(
        run / "state.json",
        {"done": ["data", "stage1", "rank", "stage1b"], "teacher_replies": 0,
         "chosen": [1, 2], "pretrained": [2]},
    )  # fmt: skip
    mods = _layers(teacher, [1]) | _layers(teacher, [2], 0.02)
    ckpt.save_atomic(
        {"layers": {i: m.state_dict() for i, m in mods.items()}, "opt": None,
         "state": {"done": True}, "experts": {"kept": True}},
        run / "stage1b.pt",
    )  # fmt: skip
    return run


def test_window_run_replaces_the_new_layers_in_stage1b(teacher, teacher_dir, tmp_path) -> None:
    run = _grown_run(teacher, teacher_dir, tmp_path / "run")
    before = ckpt.load(run / "stage1b.pt")

    cfg = WindowConfig(tokens=4 * 4 * 32, span=2, lr=3e-3)
    window_run(run, cfg)

    after = ckpt.load(run / "stage1b.pt")
    kept = ckpt.load(run / "stage1b-prewindow.pt")
    assert not torch.equal(
        after["layers"][1]["o_proj.weight"], before["layers"][1]["o_proj.weight"]
    )
    for k, v in before["layers"][2].items():  # the --init-from layer is untouched
        assert torch.equal(after["layers"][2][k], v)
    assert after["experts"] == {"kept": True}
    assert all(torch.equal(kept["layers"][1][k], v) for k, v in before["layers"][1].items())
    assert ckpt.load(run / "window.pt")["state"]["done"]
    assert "window_tokens" in (run / "state.json").read_text()

    window_run(run, cfg)  # again: re-applies the finished result, does not train on top of it
    again = ckpt.load(run / "stage1b.pt")
    assert all(torch.equal(again["layers"][1][k], v) for k, v in after["layers"][1].items())


def test_window_refuses_a_run_whose_stage2_has_started(
    teacher, teacher_dir, tmp_path, capsys
) -> None:
    run = _grown_run(teacher, teacher_dir, tmp_path / "run")
    ckpt.save_atomic({"layers": {}}, run / "stage2.pt")
    assert main(["window", str(run), "--tokens", "128"]) != 0
    err = capsys.readouterr().err
    assert "stage 2 has started" in err and "Traceback" not in err


def test_window_refuses_a_span_with_nothing_to_match(teacher, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no layer above"):
        train_window(teacher, _layers(teacher, [3]), {}, _rows(), WindowConfig(64), tmp_path / "w")


def test_window_refuses_a_run_before_stage1b(teacher, teacher_dir, tmp_path, capsys) -> None:
    run = _grown_run(teacher, teacher_dir, tmp_path / "run")
    ckpt.write_json(run / "state.json", {"done": ["data"]})
    assert main(["window", str(run), "--tokens", "128"]) != 0
    assert "stage 1b is not done" in capsys.readouterr().err


def test_window_cli_with_adapt_writes_the_adapted_layer_too(teacher, teacher_dir, tmp_path) -> None:
    run = _grown_run(teacher, teacher_dir, tmp_path / "run")
    before = ckpt.load(run / "stage1b.pt")["layers"]
    argv = ["window", str(run), "--tokens", "512", "--span", "2", "--lr", "3e-3"]
    assert main([*argv, "--adapt-lr-scale", "0.5"]) == 0
    after = ckpt.load(run / "stage1b.pt")["layers"]
    for i in (1, 2):
        assert not torch.equal(after[i]["o_proj.weight"], before[i]["o_proj.weight"]), i


def test_a_window_checkpoint_of_other_layers_is_a_one_line_error(
    teacher, teacher_dir, tmp_path, capsys
) -> None:
    run = _grown_run(teacher, teacher_dir, tmp_path / "run")
    argv = ["window", str(run), "--tokens", "256", "--span", "2"]
    assert main(argv) == 0
    (run / "stage1b.pt").unlink()
    (run / "stage1b-prewindow.pt").rename(run / "stage1b.pt")
    assert main([*argv, "--adapt-lr-scale", "0.5"]) == 2  # window.pt holds layer 1 only
    err = capsys.readouterr().err
    assert "delete" in err and "Traceback" not in err
