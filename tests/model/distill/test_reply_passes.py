"""Stage 1's estimate of how often it revisits each teacher-reply row."""

from __future__ import annotations

import torch

from k3chat_model.distill.data import interleave
from k3chat_model.distill.pipeline import REPLY_PASSES_WARN, reply_passes


def _visits(n_chat: int, n_reply: int, rows_seen: int) -> torch.Tensor:
    """Times each reply row is visited when stage 1 walks the interleaved rows in order."""
    chat = torch.arange(n_chat).unsqueeze(1)
    replies = -1 - torch.arange(n_reply).unsqueeze(1)  # reply j is tagged -1 - j
    mixed = interleave(chat, replies, every=2)
    seen = mixed[torch.arange(rows_seen) % len(mixed), 0]
    return torch.bincount(-1 - seen[seen < 0], minlength=n_reply).float()


def test_estimate_matches_the_walk_over_interleaved_rows() -> None:
    seq = 8
    for n_chat, n_reply, rows_seen in [(600, 10, 300), (600, 41, 599), (90, 7, 400)]:
        want = _visits(n_chat, n_reply, rows_seen).mean().item()
        got = reply_passes(n_chat, n_reply, rows_seen * seq, seq=seq)
        assert abs(got - want) <= 0.05 * want + 0.5, (n_chat, n_reply, got, want)


def test_session_19_budget_is_flagged_and_a_larger_reply_set_is_not() -> None:
    # 2.46M stage-1 tokens over 6,685 chat rows and 41 reply rows (192 replies): ~39 passes
    assert reply_passes(6685, 41, 2_457_600) > REPLY_PASSES_WARN
    assert reply_passes(6685, 400, 2_457_600) < REPLY_PASSES_WARN
    assert reply_passes(6685, 0, 2_457_600) == 0.0
