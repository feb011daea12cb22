"""`distill timed`: stage 2 for a wall-clock budget keeps the best held-out snapshot, and the
weights-only checkpoint it writes can be rewound to and trained on like any other."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB, StopAfter

from k3chat_model.distill import ckpt, pipeline, timed
from k3chat_model.distill.cli import main
from k3chat_model.distill.hybrid import init_kda_from_gqa, kda_config
from k3chat_model.distill.pipeline import load_hybrid
from k3chat_model.distill.stage2 import Stage2Config, train_stage2
from k3chat_model.errors import ConfigError
from k3chat_model.loading import load_model


def _rows(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.randint(3, VOCAB, (n, 32), generator=torch.Generator().manual_seed(seed))
    return rows.to(torch.int32), torch.ones_like(rows, dtype=torch.uint8)


def _run(tmp: Path, teacher_dir: Path, layers: tuple[int, ...] = (1,)) -> Path:
    run = tmp / "run"
    (run / "data").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"teacher": str(teacher_dir), "data_dir": "-"}))
    st = {"done": ["data", "stage1", "rank", "stage1b", "stage2"], "chosen": list(layers),
          "stage2_tokens": 640}  # fmt: skip
    (run / "state.json").write_text(json.dumps(st))
    teacher = load_model(teacher_dir)
    kcfg = kda_config(teacher.config, [0, 1, 2, 3])
    kda = {i: init_kda_from_gqa(teacher.model.layers[i].self_attn, kcfg, i).state_dict()
           for i in layers}  # fmt: skip
    ckpt.save_atomic(
        {"layers": kda, "opt": None, "state": {"tokens": 640, "done": True}}, run / "stage2.pt"
    )
    torch.save({"chat": _rows(6, 1), "assist": _rows(3, 2), "rank": _rows(2, 3)},
               run / "data" / "rows.pt")  # fmt: skip
    return run


def _held_out(monkeypatch, chat: list, assistant: list, val: dict | None = None) -> None:  # noqa: ANN001
    """The gate's sets (and, unless given apart, the selection sets) without a data dir."""
    monkeypatch.setattr(timed, "chat_sequences", lambda _tok, _d: chat)
    monkeypatch.setattr(timed, "assistant_sequences", lambda _tok, _pairs: assistant)
    monkeypatch.setattr(timed, "heldout_assistant", lambda _t, _tok: [])
    val = val or {"chat": chat, "assistant": assistant}
    monkeypatch.setattr(timed, "validation_sets", lambda *_a: val)


def test_timed_stage2_keeps_best_snapshot_as_a_resumable_checkpoint(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    _held_out(monkeypatch, held[:2], held[2:])
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=2, log=lambda _m: None
    )
    assert rep["steps"] >= 2 and rep["rate_tok_s"] > 0 and len(rep["evals"]) == 2
    worst = min(rep["start"]["chat"]["top1"], rep["start"]["assistant"]["top1"])
    assert min(rep["best"]["chat"]["top1"], rep["best"]["assistant"]["top1"]) >= worst
    assert rep["evals"][-1]["assistant"]["kl"] < rep["start"]["assistant"]["kl"]
    saved = ckpt.load(run / "stage2-timed.pt")
    assert saved["opt"] is None and sorted(saved["layers"]) == [1]
    assert saved["state"]["tokens"] == 640 + rep["best"].get("tokens", 0)
    assert not (run / "stage2-timed-train.pt").exists()  # scratch checkpoints are removed

    assert main(["rewind", str(run), str(run / "stage2-timed.pt")]) == 0
    students, student = load_hybrid(run, teacher_dir, [1], "stage2.pt")
    for k, v in saved["layers"][1].items():  # the best snapshot, not the last step
        assert torch.equal(students[1].state_dict()[k], v)
    rows, mask = _rows(4, 4)
    st = train_stage2(
        load_model(teacher_dir), student, students, rows, mask,
        Stage2Config(tokens=3 * 2 * 32, lr=1e-3, warmup_steps=1), run / "stage2.pt",
    )  # fmt: skip
    assert st["done"] and ckpt.load(run / "stage2.pt")["opt"] is not None


def test_stopped_timed_run_still_writes_its_best_snapshot_and_leaves_the_run_alone(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    before = (run / "stage2.pt").read_bytes()
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    rep = timed.timed_stage2(
        run, device="cpu", seconds=120, batch=2, evals=1, log=lambda _m: None, stop=StopAfter(2)
    )
    assert rep["stopped"] and rep["steps"] == 2 and rep["best_step"] == 0  # no eval reached
    saved = ckpt.load(run / "stage2-timed.pt")
    assert saved["state"]["tokens"] == 640 and sorted(saved["layers"]) == [1]
    assert (run / "stage2.pt").read_bytes() == before
    assert not (run / "stage2-timed-train.pt").exists()


def test_timed_starts_a_run_stopped_after_stage1b_and_rewinds_to_stage2(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """`run --until stage1b` then `timed` (the grow-then-train recipe): with no stage2.pt yet,
    the snapshot counts only timed's tokens, and rewind makes it a finished stage 2."""
    run = _run(tmp_path, teacher_dir)
    (run / "stage2.pt").rename(run / "stage1b.pt")
    st = json.loads((run / "state.json").read_text())
    st["done"].remove("stage2")
    st.pop("stage2_tokens")
    (run / "state.json").write_text(json.dumps(st))
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=1, keep="last", log=lambda _m: None
    )
    saved = ckpt.load(run / "stage2-timed.pt")
    assert rep["best_step"] > 0 and saved["state"]["tokens"] == rep["best"]["tokens"]
    assert main(["rewind", str(run), str(run / "stage2-timed.pt")]) == 0
    st = json.loads((run / "state.json").read_text())
    assert "stage2" in st["done"] and st["stage2_tokens"] == rep["best"]["tokens"]


def test_fresh_replies_are_new_samples_of_the_runs_prompts_and_kept(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    pool = [f"Tell me about topic {c}." for c in "abc"]
    (run / "data" / "teacher_replies.json").write_text(json.dumps([[q, "old"] for q in pool]))
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "gen_max_new": 40}))
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    used = []
    real_rows = timed.stage2_rows
    monkeypatch.setattr(
        timed, "stage2_rows", lambda *a, **k: used.append(real_rows(*a, **k)) or used[-1]
    )
    timed.timed_stage2(
        run, device="cpu", seconds=5, batch=2, evals=1, fresh_replies=7, seed=5,
        log=lambda _m: None,
    )  # fmt: skip
    pairs = json.loads((run / "data" / "fresh_replies-5.json").read_text())
    assert len(pairs) == 7 and {q for q, _ in pairs} == set(pool)  # 7 samples cycle all 3
    assert len({r for _, r in pairs}) > 3  # repeated prompts got different replies
    base = {tuple(r.tolist()) for r in real_rows(run, all_chat=True)[0]}
    assert {tuple(r.tolist()) for r in used[0][0]} - base  # trained on them
    again = timed.sample_fresh_replies(run, None, None, 7, 5, 4)  # kept: not generated again
    assert again == pairs


def test_row_order_seed_shuffles_within_each_kind_and_reaches_appended_rows(
    teacher_dir: Path, tmp_path: Path
) -> None:
    """A short budget walks the first rows only: with `order_seed`, rows appended at the end
    (fresh replies) come early for some seed, every row keeps its own mask, chat and reply rows
    still alternate, and the order is the seed's alone."""
    run = _run(tmp_path, teacher_dir)
    chat, _ = _rows(6, 1)
    extra = [(list(range(3, 35)), [0] * 32)]  # one 32-token row, recognisable by its mask
    plain = pipeline.stage2_rows(run, all_chat=True, extra=extra)
    assert plain[1][1::2].sum(1).tolist() == [32, 32, 32, 0, 32, 32]  # appended: 4th reply row
    orders = [pipeline.stage2_rows(run, all_chat=True, extra=extra, order_seed=s) for s in (0, 1)]
    chat_set = {tuple(r.tolist()) for r in chat}
    for rows, mask in orders:
        assert all(tuple(r.tolist()) in chat_set for r in rows[0::2])  # alternation kept
        assert set(map(tuple, rows.tolist())) == set(map(tuple, plain[0].tolist()))  # replies cycle
        extra_at = (rows == torch.arange(3, 35, dtype=rows.dtype)).all(1)
        assert torch.equal(extra_at, mask.sum(1) == 0)  # each row with its own mask
    again = pipeline.stage2_rows(run, all_chat=True, extra=extra, order_seed=0)
    assert torch.equal(again[0], orders[0][0])
    assert not torch.equal(orders[0][0], orders[1][0])
    first = [
        int((m[1:6:2].sum(1) == 0).any())
        for _, m in (
            pipeline.stage2_rows(run, all_chat=True, extra=extra, order_seed=s) for s in range(8)
        )
    ]
    assert any(first)  # the appended row is among the first three reply rows for some seed


def test_replies_per_chat_puts_that_many_reply_rows_after_each_chat_row(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """`timed --replies-per-chat 2` trains on chat, reply, reply, … (replies cycle, each
    with its own mask), so two thirds of the rows are teacher replies."""
    run = _run(tmp_path, teacher_dir)
    (chat, _), (replies, _) = _rows(6, 1), _rows(3, 2)
    used = []
    real_rows = timed.stage2_rows
    monkeypatch.setattr(
        timed, "stage2_rows", lambda *a, **k: used.append(real_rows(*a, **k)) or used[-1]
    )
    _held_out(monkeypatch, [(r.tolist(), [1] * 32) for r in chat[:1]],
              [(r.tolist(), [1] * 32) for r in replies[:1]])  # fmt: skip
    args = ["timed", str(run), "--device", "cpu", "--seconds", "5", "--batch", "2",
            "--evals", "1", "--replies-per-chat", "2", "--seed", "3"]  # fmt: skip
    assert main(args) == 0
    rows, mask = used[0]
    assert len(rows) == 18 and len(mask) == 18
    key = lambda t: {tuple(r.tolist()) for r in t}  # noqa: E731
    assert key(rows[0::3]) == key(chat)  # every chat row once, each followed by two replies
    follow = [tuple(r.tolist()) for i, r in enumerate(rows) if i % 3]
    assert sorted(follow) == sorted([tuple(r.tolist()) for r in replies] * 4)  # replies cycle
    assert json.loads((run / "timed.json").read_text())["steps"] > 0
    assert main([*args[:-4], "--replies-per-chat", "0"]) == 2


def test_fresh_replies_without_teacher_replies_is_a_one_line_error(
    teacher_dir: Path, tmp_path: Path, capsys
) -> None:
    run = _run(tmp_path, teacher_dir)
    args = ["timed", str(run), "--device", "cpu", "--seconds", "5", "--fresh-replies", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no teacher replies" in err and err.count("\n") == 1
    assert not (run / "stage2-timed.pt").exists()


def test_unknown_or_missing_device_is_a_one_line_error(
    teacher_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for dev, why in (("nosuch", "unknown device"), ("cuda", "no CUDA GPU")):
        assert main(["timed", str(run), "--device", dev, "--seconds", "5"]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
    assert not (run / "stage2-timed.pt").exists()


def test_snapshot_is_chosen_on_the_selection_sets_not_the_gates(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    val = {"chat": [held[2]], "assistant": [held[3]]}
    _held_out(monkeypatch, held[:1], held[1:2], val)
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=2, log=lambda _m: None
    )
    scored = [rep["start"] | {"step": 0}, *rep["evals"]]
    assert all("val" in e for e in scored)
    best = max(scored, key=timed._score)
    assert rep["best_step"] == best["step"]
    assert rep["best"]["val"] == best["val"]


def test_keep_topics_chooses_on_the_topics_selection_set_alone(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(5, 9)[0]]
    val = {"chat": [held[2]], "assistant": [held[3]], "topics": [held[4]]}
    _held_out(monkeypatch, held[:1], held[1:2], val)
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=3, keep="topics", log=lambda _m: None
    )
    scored = [rep["start"] | {"step": 0}, *rep["evals"]]
    best = max(scored, key=lambda e: (e["val"]["topics"]["top1"], -e["val"]["topics"]["kl"]))
    assert rep["best_step"] == best["step"]
    assert rep["best"]["val"]["topics"] == best["val"]["topics"]


def test_keep_last_writes_the_last_evaluated_snapshot(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=2, keep="last", log=lambda _m: None
    )
    assert rep["best_step"] == rep["evals"][-1]["step"] == rep["steps"]
    assert ckpt.load(run / "stage2-timed.pt")["state"]["tokens"] == 640 + rep["evals"][-1]["tokens"]


def test_layers_taken_trained_from_init_from_train_at_their_lr_scale(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir, layers=(1, 2))
    st = json.loads((run / "state.json").read_text())
    (run / "state.json").write_text(json.dumps({**st, "pretrained": [1]}))
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    _held_out(monkeypatch, held[:2], held[2:])
    scales = []  # the rate is measured on steps that freeze the same layers as the run
    real = timed._scratch_train
    monkeypatch.setattr(timed, "_scratch_train",
                        lambda m, cfg, *a, **k: scales.append(cfg.lr_scale) or real(m, cfg, *a, **k))  # fmt: skip
    rep = timed.timed_stage2(run, device="cpu", seconds=4, batch=2, lr=3e-3, evals=1,
                             keep="last", pretrained_scale=0.0, log=lambda _m: None)  # fmt: skip
    assert rep["steps"] >= 1 and rep["lr_scale"] == {1: 0.0}
    assert scales == [{1: 0.0}, {1: 0.0}]  # the rate measurement, then the training
    start = ckpt.load(run / "stage2.pt")["layers"]
    last = ckpt.load(run / "stage2-timed.pt")["layers"]
    assert all(torch.equal(start[1][k], v) for k, v in last[1].items())  # frozen
    assert any(not torch.equal(start[2][k], v) for k, v in last[2].items())  # trained


def test_pretrained_train_lets_only_the_listed_seeded_layers_learn(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Growth by layer 2 over seeded layers 1 and 3: `pretrained_train=[3]` adapts the layer
    above the new one and keeps the one below exactly as it was."""
    run = _run(tmp_path, teacher_dir, layers=(1, 2, 3))
    st = json.loads((run / "state.json").read_text())
    (run / "state.json").write_text(json.dumps({**st, "pretrained": [1, 3]}))
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    _held_out(monkeypatch, held[:2], held[2:])
    rep = timed.timed_stage2(run, device="cpu", seconds=4, batch=2, lr=3e-3, evals=1, keep="last",
                             pretrained_scale=0.5, pretrained_train=[3], log=lambda _m: None)  # fmt: skip
    assert rep["lr_scale"] == {1: 0.0, 3: 0.5}
    start = ckpt.load(run / "stage2.pt")["layers"]
    last = ckpt.load(run / "stage2-timed.pt")["layers"]
    assert all(torch.equal(start[1][k], v) for k, v in last[1].items())  # frozen
    for i in (2, 3):
        assert any(not torch.equal(start[i][k], v) for k, v in last[i].items())  # trained
    with pytest.raises(ConfigError, match=r"layers \[2\] were not taken trained"):
        timed.timed_stage2(run, device="cpu", seconds=4, batch=2, pretrained_train=[2, 3],
                           log=lambda _m: None)  # fmt: skip


def test_factual_rows_train_on_greedy_answers_to_training_questions_only(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """`--factual N`: the teacher's greedy answers to N training questions, kept on disk,
    join the rows with the loss on the answer alone, and the quiz selection set is reported."""
    from k3chat_model.distill import factual_rows
    from k3chat_model.distill.data import ChatTokenizer
    from k3chat_model.distill.quiz_train import factual_train_prompts

    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    used = []
    real_interleave = timed.interleave
    monkeypatch.setattr(
        timed, "interleave", lambda *a, **k: used.append(real_interleave(*a, **k)) or used[-1]
    )
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, evals=1, factual=5, factual_every=1,
        log=lambda _m: None,
    )  # fmt: skip
    triples = json.loads((run / "data" / factual_rows.FACTUAL_FILE).read_text())
    questions = [q for q, _, _ in triples]
    assert questions == factual_rows.training_questions(5) and len(set(questions)) == 5
    assert set(questions) <= set(factual_train_prompts())
    assert all(isinstance(f, bool) for _, _, f in triples)
    assert "quiz" in rep["start"]["val"] and "quiz" in rep["evals"][-1]["val"]
    rows, mask = used[0], used[1]
    assert len(rows) == 2 * len(timed.stage2_rows(run, all_chat=True)[0])
    # every other row is a factual row, its mask on the answers: the prompts are left out
    frows, fmask = factual_rows.factual_rows(ChatTokenizer(teacher_dir), triples, rows.shape[1])
    expected = {(tuple(r.tolist()), tuple(m.tolist())) for r, m in zip(frows, fmask)}
    got = {(tuple(r.tolist()), tuple(m.tolist())) for r, m in zip(rows[1::2], mask[1::2])}
    assert got <= expected and (mask[1::2] == 0).any() and (mask[0::2] == 1).all()
    again = factual_rows.factual_replies(run, None, None, 5, 4)  # kept: not generated again
    assert again == triples


def test_answer_sequence_scores_the_answer_and_only_a_finished_answers_end(
    teacher_dir: Path,
) -> None:
    from k3chat_model.distill.data import ChatTokenizer
    from k3chat_model.distill.factual_rows import answer_sequence

    tok = ChatTokenizer(teacher_dir)
    q_ids = tok.prompt("What is two plus two?")
    body = tok.encode("Four.")
    for finished in (True, False):
        ids, mask = answer_sequence(tok, "What is two plus two?", "Four.", finished)
        assert ids[: len(q_ids)] == q_ids and ids[len(q_ids) : len(q_ids) + len(body)] == body
        assert mask[: len(q_ids)] == [0] * len(q_ids)
        assert mask[len(q_ids) : len(q_ids) + len(body)] == [1] * len(body)
        assert set(mask[len(q_ids) + len(body) :]) == {int(finished)}


def test_timed_with_ema_scores_the_average_and_can_snapshot_it(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(4, 9)[0]]
    _held_out(monkeypatch, held[:2], held[2:])
    calls = iter(range(100))  # start, then live and average at each evaluation: the last wins
    monkeypatch.setattr(timed, "_score", lambda _res: (next(calls), 0.0))
    given, live = [], []
    real_weights, real_applied = timed.WeightEMA.weights, timed.WeightEMA.applied
    monkeypatch.setattr(
        timed.WeightEMA, "weights", lambda self: given.append(real_weights(self)) or given[-1]
    )

    def applied(self):  # noqa: ANN001, ANN202 - records the live weights the average replaces
        live.append({k: v.clone() for k, v in self.students[1].state_dict().items()})
        return real_applied(self)

    monkeypatch.setattr(timed.WeightEMA, "applied", applied)
    rep = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=1, ema=0.5, log=lambda _m: None
    )
    last = rep["evals"][-1]
    assert rep["ema"] == 0.5 and rep["best_source"] == "ema" and rep["best_step"] == last["step"]
    # The "ema" evaluation ran a different model from the live one. (Not checked by its KL:
    # in the bf16 evaluation a near-converged average can round to the live model's KL.)
    assert any(not torch.equal(v, given[-1]["layers"][1][k]) for k, v in live[-1].items())
    assert rep["best"]["assistant"] == last["ema"]["assistant"]
    saved = ckpt.load(run / "stage2-timed.pt")
    for k, v in saved["layers"][1].items():  # the snapshot is the average's weights
        assert torch.equal(v, given[-1]["layers"][1][k])


def test_timed_refuses_an_ema_decay_outside_0_1(teacher_dir: Path, tmp_path: Path) -> None:
    run = _run(tmp_path, teacher_dir)
    with pytest.raises(ConfigError, match="--ema"):
        timed.timed_stage2(run, device="cpu", seconds=5, ema=1.0, log=lambda _m: None)


def test_timed_refuses_an_eval_batch_below_1(teacher_dir: Path, tmp_path: Path, capsys) -> None:
    run = _run(tmp_path, teacher_dir)
    args = ["timed", str(run), "--device", "cpu", "--seconds", "5", "--eval-batch", "0"]
    assert main(args) == 2
    assert "--eval-batch 0" in capsys.readouterr().err


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it in `timed` runs (no final write)."""


def test_a_run_killed_after_an_evaluation_keeps_the_snapshot_that_evaluation_chose(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])

    class KilledAfterFirstSnapshot:
        @property
        def stop(self) -> bool:
            if (run / "timed.json").exists():
                raise _Killed
            return False

    with pytest.raises(_Killed):
        timed.timed_stage2(
            run, device="cpu", seconds=8, batch=2, lr=3e-3, evals=3, keep="last",
            log=lambda _m: None, stop=KilledAfterFirstSnapshot(),
        )  # fmt: skip

    rep = json.loads((run / "timed.json").read_text())
    assert rep["partial"] and len(rep["evals"]) == 1
    assert rep["best_step"] == rep["evals"][0]["step"] == rep["steps"] > 0
    saved = ckpt.load(run / "stage2-timed.pt")
    assert saved["state"]["tokens"] == 640 + rep["evals"][0]["tokens"]
    assert sorted(saved["layers"]) == [1]


def test_the_budget_leaves_room_for_the_evaluations(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Session 34: on an H200 each evaluation took 78 s and the run overran its 540 s by
    minutes, so the call's limit killed it before any snapshot was written."""
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    real = timed.kl_metrics

    def slow(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.5)  # 4 sets: 2 s an evaluation
        return real(*a, **kw)

    monkeypatch.setattr(timed, "kl_metrics", slow)
    rep = timed.timed_stage2(
        run, device="cpu", seconds=12, batch=2, lr=3e-3, evals=3, log=lambda _m: None
    )
    assert rep["eval_s"] >= 2.0 and len(rep["evals"]) == 3
    assert rep["seconds"] <= 15  # without the evaluations priced: about 18
    assert not rep["partial"]


def test_steps_that_slow_after_the_rate_was_measured_do_not_overrun_the_budget(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Session 44: the CPU slowed under load after the start, and a 6,600 s run took 6,999 s.
    A rate measured 50x too high stands for that: the step count is far out of reach, so the
    guard must evaluate once more and stop in time, keeping the snapshot it chose."""
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    real = timed._measure_rate
    monkeypatch.setattr(timed, "_measure_rate", lambda *a, **kw: 50 * real(*a, **kw))
    rep = timed.timed_stage2(
        run, device="cpu", seconds=8, batch=2, lr=3e-3, evals=2, keep="last", log=lambda _m: None
    )
    assert rep["deadline"] and not rep["stopped"] and not rep["partial"]
    assert rep["seconds"] <= 9  # the unguarded run would take minutes
    assert len(rep["evals"]) >= 1 and rep["evals"][-1]["step"] == rep["steps"] > 0
    assert rep["best_step"] == rep["steps"]  # keep="last": the stop point's evaluation
    saved = ckpt.load(run / "stage2-timed.pt")
    assert saved["state"]["tokens"] == 640 + rep["evals"][-1]["tokens"]


def test_an_earlier_snapshot_never_rewound_is_set_aside_not_overwritten(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    first = timed.timed_stage2(
        run, device="cpu", seconds=6, batch=2, lr=3e-3, evals=1, keep="last", log=lambda _m: None
    )
    kept_bytes = (run / "stage2-timed.pt").read_bytes()
    lines: list[str] = []
    timed.timed_stage2(run, device="cpu", seconds=120, batch=2, evals=1, log=lines.append,
                       stop=StopAfter(1))  # fmt: skip
    kept = run / f"stage2-timed-{640 + first['best']['tokens']}.pt"
    assert kept.read_bytes() == kept_bytes  # the first run's training is still there
    assert any(kept.name in line and "rewind" in line for line in lines)
    assert ckpt.load(run / "stage2-timed.pt")["state"]["tokens"] == 640  # the second run's own

    # once rewound, the snapshot is the run's stage 2: nothing to keep apart
    assert main(["rewind", str(run), str(run / "stage2-timed.pt")]) == 0
    assert timed.set_aside_unrewound_snapshot(run, log=lines.append) is None
    assert (run / "stage2-timed.pt").exists()
    (run / "stage2-timed.pt").write_bytes(b"torn")  # unreadable: kept, never overwritten
    assert timed.set_aside_unrewound_snapshot(run, log=lines.append).name == (
        "stage2-timed-unreadable.pt"
    )


def test_timed_also_keeps_the_last_weights_when_the_rule_kept_an_earlier_step(
    teacher_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A near-tie on the keep rule can hide a better last step (session 58): its weights are
    written beside the kept ones, `rewind` takes them, and a later run sets them aside."""
    run = _run(tmp_path, teacher_dir)
    held = [(r.tolist(), [1] * 32) for r in _rows(2, 9)[0]]
    _held_out(monkeypatch, held[:1], held[1:])
    scores = iter([(0.0, 0.0), (2.0, 0.0), (1.0, 0.0)])  # start, first eval (kept), last eval
    monkeypatch.setattr(timed, "_score", lambda _res: next(scores))
    rep = timed.timed_stage2(
        run, device="cpu", seconds=8, batch=2, lr=3e-3, evals=2, log=lambda _m: None
    )
    first, last = rep["evals"]
    assert rep["best_step"] == first["step"] < last["step"] == rep["steps"]
    assert rep["last_snapshot"] == "stage2-timed-last.pt"
    kept, final = ckpt.load(run / "stage2-timed.pt"), ckpt.load(run / "stage2-timed-last.pt")
    assert kept["state"]["tokens"] == 640 + first["tokens"]
    assert final["state"]["tokens"] == 640 + last["tokens"]
    assert any(not torch.equal(v, kept["layers"][1][k]) for k, v in final["layers"][1].items())

    assert main(["rewind", str(run), str(run / "stage2-timed-last.pt")]) == 0
    students, _ = load_hybrid(run, teacher_dir, [1], "stage2.pt")
    for k, v in final["layers"][1].items():
        assert torch.equal(students[1].state_dict()[k], v)
    # a rewound last snapshot is the run's stage 2: a new run moves nothing; one never
    # rewound (the kept one here) is renamed, not overwritten
    assert timed.set_aside_unrewound_snapshot(run, lambda _m: None, "stage2-timed-last.pt") is None
    assert timed.set_aside_unrewound_snapshot(run, lambda _m: None).name == (
        f"stage2-timed-{640 + first['tokens']}.pt"
    )
