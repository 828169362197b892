"""pass@k and pass^k against values worked out by hand, edges included."""

from __future__ import annotations

import itertools

import pytest

from openforgerl.evaluation.estimators import mean, pass_at_k, pass_hat_k


@pytest.mark.parametrize("n, c, k, at, hat", [
    (1, 1, 1, 1.0, 1.0),
    (1, 0, 1, 0.0, 0.0),
    (3, 3, 3, 1.0, 1.0),        # n = k, all pass
    (3, 0, 3, 0.0, 0.0),        # n = k, all fail
    (3, 1, 3, 1.0, 0.0),        # n = k: pass@k is "any of them", pass^k "all of them"
    (4, 2, 1, 0.5, 0.5),
    (4, 2, 2, 5 / 6, 1 / 6),    # 1 - C(2,2)/C(4,2); C(2,2)/C(4,2)
    (5, 1, 3, 0.6, 0.0),        # 1 - C(4,3)/C(5,3) = 1 - 4/10
    (10, 7, 3, 1 - 1 / 120, 35 / 120),
])
def test_known_values(n: int, c: int, k: int, at: float, hat: float):
    assert pass_at_k(n, c, k) == pytest.approx(at)
    assert pass_hat_k(n, c, k) == pytest.approx(hat)


def test_they_equal_the_mean_over_every_k_subset_of_the_attempts():
    outcomes = [1, 0, 1, 1, 0, 0, 1]
    for k in (1, 2, 3, 5, 7):
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(7, 4, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
        assert pass_hat_k(7, 4, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))


def test_fewer_attempts_than_k_is_undefined_not_zero():
    assert pass_at_k(2, 2, 3) is None and pass_hat_k(2, 0, 3) is None


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, -1, 1), (3, 1, 0)])
def test_impossible_counts_are_refused(n: int, c: int, k: int):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_skips_undefined_values():
    assert mean([1.0, None, 0.0]) == 0.5 and mean([None]) is None and mean([]) is None
