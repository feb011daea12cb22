"""The gate's top-1 interval: whole sequences resampled, so it widens when sequences disagree."""

from __future__ import annotations

import random

from k3chat_model.distill.metrics import bootstrap_ci


def test_interval_brackets_the_estimate_and_shrinks_with_more_sequences() -> None:
    rng = random.Random(0)
    den = [rng.randint(20, 40) for _ in range(400)]
    num = [round(d * rng.uniform(0.7, 1.0)) for d in den]
    point = sum(num) / sum(den)
    lo, hi = bootstrap_ci(num, den)
    assert lo < point < hi
    lo_few, hi_few = bootstrap_ci(num[:40], den[:40])
    assert hi_few - lo_few > 2 * (hi - lo)  # ~sqrt(10)x wider with a tenth of the sequences


def test_sequence_level_spread_is_not_hidden_by_token_count() -> None:
    # Half the sequences agree fully, half not at all: per-token binomial would say ±0.5 point
    # at 40,000 tokens, but there are only 40 independent sequences.
    den = [1000] * 40
    num = [1000] * 20 + [0] * 20
    lo, hi = bootstrap_ci(num, den)
    assert hi - lo > 0.2


def test_uniform_sequences_and_single_sequence_give_a_point() -> None:
    assert bootstrap_ci([9, 9, 9], [10, 10, 10]) == (0.9, 0.9)
    assert bootstrap_ci([3], [4]) == (0.75, 0.75)
