"""Init from GQA, stage-1 / stage-2 training steps, and resume after a simulated kill."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from distill_helpers import VOCAB, StopAfter, tiny_teacher

from k3chat_model.distill.hybrid import (
    init_kda_from_gqa,
    kda_config,
    layers_from_official,
    official_kda_tensors,
    swap_in,
)
from k3chat_model.distill.kda_train import kda_forward_train
from k3chat_model.distill.stage1 import Stage1Config, capture, train_stage1
from k3chat_model.distill.stage2 import Stage2Config, train_stage2
from k3chat_model.errors import ConfigError


def _rows(n: int = 8, T: int = 32) -> torch.Tensor:
    return torch.randint(3, VOCAB, (n, T), generator=torch.Generator().manual_seed(5))


def _students(teacher, layers):
    cfg = kda_config(teacher.config, list(range(teacher.config.num_hidden_layers)))
    return {i: init_kda_from_gqa(teacher.model.layers[i].self_attn, cfg, i) for i in layers}


def test_kv_heads_repeated_over_their_query_group(teacher) -> None:
    s = _students(teacher, [1])[1]
    k = teacher.model.layers[1].self_attn.k_proj.weight.view(2, 16, 64)
    got = s.k_proj.weight.view(4, 16, 64)
    for h in range(4):  # SDPA enable_gqa pairs query head h with kv head h // 2
        assert torch.equal(got[h], k[h // 2])
    assert torch.equal(s.q_proj.weight, teacher.model.layers[1].self_attn.q_proj.weight)
    assert torch.all(s.q_conv1d.weight[..., -1] == 1) and torch.all(
        s.q_conv1d.weight[..., :-1] == 0
    )


def test_swap_in_marks_layers_kda_and_official_names_round_trip(teacher) -> None:
    studs = _students(teacher, [1, 3])
    tensors = official_kda_tensors(studs)
    assert "language_model.model.layers.3.self_attn.A_log" in tensors
    back = layers_from_official(tensors, kda_config(teacher.config, [1, 3]))
    assert torch.equal(back[3].o_proj.weight, studs[3].o_proj.weight)
    swap_in(teacher, studs)
    assert teacher.config.layer_kinds == ["gqa", "kda", "gqa", "kda"]
    with torch.no_grad():
        assert torch.isfinite(teacher(_rows(1)).logits).all()


def test_capture_stops_at_the_last_layer_asked_for_with_the_full_pass_values(teacher) -> None:
    ids = _rows(2)
    full: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [
        teacher.model.layers[i].self_attn.register_forward_hook(
            lambda _m, a, o, i=i: full.__setitem__(i, (a[0].float(), o.float()))
        )
        for i in range(4)
    ]
    with torch.no_grad():
        teacher.model(ids)
    for h in hooks:
        h.remove()
    above: list[int] = []
    spy = teacher.model.layers[3].register_forward_hook(lambda *_: above.append(1))
    try:
        got = capture(teacher, ids, [2, 1])
    finally:
        spy.remove()
    assert sorted(got) == [1, 2] and not above  # layer 3 never ran
    for i in (1, 2):
        assert torch.equal(got[i][0], full[i][0]) and torch.equal(got[i][1], full[i][1])
    assert not teacher.model.layers[2].self_attn._forward_hooks  # hooks removed


def test_stage1_lowers_loss_and_resume_matches_uninterrupted(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = Stage1Config(tokens=6 * 2 * 32, batch=2, lr=3e-3, warmup_steps=1, ckpt_seconds=0)
    t = tiny_teacher()
    full = _students(t, [1, 2])
    st = train_stage1(t, full, _rows(), cfg, tmp_path / "a.pt")
    assert st["done"] and st["step"] == 6

    log = tmp_path / "log.jsonl"
    part = _students(t, [1, 2])
    st = train_stage1(t, part, _rows(), cfg, tmp_path / "b.pt", log, stop=StopAfter(3))
    assert not st["done"] and st["step"] == 3
    resumed = _students(t, [1, 2])  # a fresh process: weights come from the checkpoint
    st = train_stage1(t, resumed, _rows(), cfg, tmp_path / "b.pt", log)
    assert st["done"] and st["step"] == 6
    for i in (1, 2):
        for a, b in zip(full[i].parameters(), resumed[i].parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-6)
    losses = [json.loads(line)["rel_mse"] for line in log.read_text().splitlines()]
    assert len(losses) == 6 and losses[-1] < losses[0]


def test_stage2_lowers_kl(tmp_path: Path) -> None:
    torch.manual_seed(0)
    t = tiny_teacher()
    student = tiny_teacher()
    studs = _students(t, [1, 2])
    swap_in(student, studs)
    rows = _rows(4)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    from k3chat_model.distill.metrics import compare

    before = compare(t, student, rows, mask)["kl"]
    train_stage2(
        t,
        student,
        studs,
        rows,
        mask,
        Stage2Config(tokens=15 * 2 * 32, lr=3e-3, warmup_steps=1),
        tmp_path / "s2.pt",
    )
    student.eval()
    after = compare(t, student, rows, mask)["kl"]
    assert after < 0.7 * before


def test_extended_stage2_restarts_its_schedule(tmp_path: Path) -> None:
    torch.manual_seed(0)
    t, student = tiny_teacher(), tiny_teacher()
    studs = _students(t, [1])
    swap_in(student, studs)
    rows = _rows(4)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    log = tmp_path / "log.jsonl"
    step_tokens = 2 * rows.shape[1]
    cfg = Stage2Config(tokens=4 * step_tokens, lr=1e-3, warmup_steps=2, ckpt_seconds=0)
    train_stage2(t, student, studs, rows, mask, cfg, tmp_path / "s2.pt", log)
    cfg = Stage2Config(
        tokens=10 * step_tokens, lr=1e-3, warmup_steps=2, rewarm_tokens=4 * step_tokens
    )
    st = train_stage2(t, student, studs, rows, mask, cfg, tmp_path / "s2.pt", log, StopAfter(2))
    assert not st["done"] and st["step"] == 6  # killed mid-extension: its checkpoint is not done
    assert not torch.load(tmp_path / "s2.pt", weights_only=False)["state"]["done"]
    st = train_stage2(t, student, studs, rows, mask, cfg, tmp_path / "s2.pt", log)
    assert st["done"] and st["step"] == 10
    lrs = [json.loads(line)["lr"] for line in log.read_text().splitlines()]
    assert lrs[2] > lrs[3]  # the first schedule was decaying
    assert lrs[4] < lrs[5]  # the extended one warms up again instead of jumping to its peak
    assert lrs[5] == pytest.approx(1e-3, rel=0.02)  # ...to the full peak, not the old curve's
    assert lrs[9] < 3e-4 and lrs[9] < lrs[6]  # and decays over the new tokens


def test_top1_term_breaks_teacher_ties_towards_its_argmax() -> None:
    """KL + λ·CE(argmax) is minimised by (t + λ·onehot) / (1 + λ): the teacher, nudged so that a
    near-tied top token wins greedy decoding; λ = 0 leaves plain KL (the student matches t)."""
    from k3chat_model.distill.stage2 import kd_loss

    t_probs = torch.tensor([0.40, 0.39, 0.15, 0.06])
    t_logits = t_probs.log().view(1, 1, 4).expand(1, 2, 4)  # position 0 predicts token 1
    mask = torch.tensor([[1, 1]])
    for lam in (0.0, 0.2):
        z = torch.zeros(1, 2, 4, requires_grad=True)
        opt = torch.optim.Adam([z], lr=0.05)
        for _ in range(1500):
            opt.zero_grad()
            kl, ce, _ = kd_loss(t_logits, z, mask)
            (kl + lam * ce).backward()
            opt.step()
        got = z[0, 0].detach().softmax(-1)
        want = (t_probs + lam * torch.nn.functional.one_hot(torch.tensor(0), 4)) / (1 + lam)
        assert torch.allclose(got, want, atol=2e-3), (lam, got, want)
    assert got[0] - got[1] > 0.15  # the 0.01 teacher margin became a clear one


def test_tvd_term_matches_a_float64_reference_on_masked_positions() -> None:
    """The TVD term is ½·Σ|p_teacher − p_student| averaged over the positions that train, and
    it falls below half the teacher's top-1 margin only where the two argmaxes agree."""
    from k3chat_model.distill.stage2 import kd_loss

    torch.manual_seed(0)
    t_logits = 3 * torch.randn(2, 6, 11)
    s_logits = t_logits + torch.randn(2, 6, 11)
    mask = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 0, 1, 1, 0, 1]])
    _, _, tvd = kd_loss(t_logits, s_logits, mask)
    m = mask[:, 1:].bool()
    t = t_logits[:, :-1][m].double().softmax(-1)
    s = s_logits[:, :-1][m].double().softmax(-1)
    per_pos = 0.5 * (t - s).abs().sum(-1)
    assert abs(tvd.item() - per_pos.mean().item()) / per_pos.mean().item() < 1e-6
    top2 = t.topk(2, -1).values
    close = per_pos < (top2[:, 0] - top2[:, 1]) / 2
    assert 0 < close.sum() < len(close)
    assert torch.equal(t.argmax(-1)[close], s.argmax(-1)[close])


def test_stage2_lr_scale_zero_freezes_a_layer_out_of_the_backward(tmp_path: Path) -> None:
    """A grown hybrid may freeze its shipped layers: they keep their weights, get no gradient
    and no optimizer state, so the backward stops at the lowest layer that trains."""
    torch.manual_seed(0)
    t, student = tiny_teacher(), tiny_teacher()
    studs = _students(t, [1, 2])
    swap_in(student, studs)
    rows = _rows(4)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    frozen = {k: v.clone() for k, v in studs[1].state_dict().items()}
    trained = {k: v.clone() for k, v in studs[2].state_dict().items()}
    cfg = Stage2Config(tokens=3 * 2 * 32, lr=3e-3, warmup_steps=1, lr_scale={1: 0.0})
    train_stage2(t, student, studs, rows, mask, cfg, tmp_path / "s2.pt")
    assert all(torch.equal(v, frozen[k]) for k, v in studs[1].state_dict().items())
    assert all(p.grad is None for p in studs[1].parameters())
    assert any(not torch.equal(v, trained[k]) for k, v in studs[2].state_dict().items())
    opt = torch.load(tmp_path / "s2.pt", weights_only=False)["opt"]
    n_trained = sum(1 for _ in studs[2].parameters())
    assert sum(len(g["params"]) for g in opt["param_groups"]) == n_trained

    cfg = Stage2Config(tokens=2 * 32, lr=3e-3, lr_scale={1: 0.0, 2: 0.0})
    with pytest.raises(ConfigError, match="no layer to train"):
        train_stage2(t, student, studs, rows, mask, cfg, tmp_path / "s2b.pt")


def test_stage1_in_context_learns_the_stream_of_the_hybrid_it_joins(tmp_path: Path) -> None:
    """With `context`, stage 1's targets come from the teacher with the hybrid's KDA layers
    swapped in below the new layer; the teacher is left as it was."""
    t = tiny_teacher()
    ctx = _students(t, [0])  # a KDA layer the new layer 2 will sit above
    rows = _rows()
    cfg = Stage1Config(tokens=2 * 32, batch=2, lr=0.0, warmup_steps=1, ckpt_seconds=0)

    def first_loss(context, name: str) -> float:  # noqa: ANN001
        return train_stage1(t, _students(t, [2]), rows, cfg, tmp_path / name, context=context)[
            "loss"
        ][2]

    def by_hand(model) -> float:  # noqa: ANN001
        x, y = capture(model, rows[:2].long(), [2])[2]
        y_hat = kda_forward_train(_students(t, [2])[2], x)
        return ((y_hat - y).pow(2).sum() / y.pow(2).sum()).item()

    hybrid = swap_in(copy.deepcopy(t), copy.deepcopy(ctx))
    original = t.model.layers[0].self_attn
    assert first_loss(ctx, "a.pt") == pytest.approx(by_hand(hybrid), rel=1e-5)
    assert t.model.layers[0].self_attn is original
    assert first_loss(None, "b.pt") == pytest.approx(by_hand(t), rel=1e-5)
    assert by_hand(hybrid) != pytest.approx(by_hand(t), rel=1e-3)
    with pytest.raises(ValueError, match="both trained and context"):
        train_stage1(t, _students(t, [0]), rows, cfg, tmp_path / "c.pt", context=ctx)


def test_stage2_with_the_head_fused_into_the_loss_gets_the_logits_paths_gradients(
    tmp_path: Path, monkeypatch
) -> None:
    """Stage 2 computes the head chunk by chunk inside the loss (`fused_head_kd_loss`); the
    KDA layers must get the gradients the plain path (logits, then `fused_kd_loss`) gives them,
    on masked rows too."""
    from k3chat_model.distill import stage2

    torch.manual_seed(0)
    t = tiny_teacher()
    rows = _rows(4)
    mask = torch.ones_like(rows, dtype=torch.uint8)
    mask[0, :10] = 0
    grads = {}
    for fused in (True, False):
        monkeypatch.setattr(stage2, "FUSE_HEAD", fused)
        torch.manual_seed(1)
        student = tiny_teacher()
        student.load_state_dict(t.state_dict())
        studs = _students(t, [1, 2])
        swap_in(student, studs)
        params = [p for i in (1, 2) for p in studs[i].parameters()]
        cfg = Stage2Config(tokens=2 * 32, lr=1e-3, warmup_steps=1, top1_weight=0.5, tvd_weight=1.0)

        def keep(_state: dict, params=params, fused=fused) -> None:
            grads[fused] = torch.cat([p.grad.flatten() for p in params])

        train_stage2(t, student, studs, rows, mask, cfg, tmp_path / f"s2-{fused}.pt", on_step=keep)
    assert grads[False].norm() > 0
    # the same bf16 products row by row: equal here, and within bf16 rounding in general
    assert float((grads[True] - grads[False]).norm() / grads[False].norm()) < 2e-2
