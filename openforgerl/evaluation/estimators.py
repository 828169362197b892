"""pass@k and pass^k from n attempts of which c succeeded, without bias (Chen et al. 2021's estimator).

pass@k: the chance that at least one of k attempts drawn from the n succeeds, 1 - C(n-c, k) / C(n, k).
pass^k: the chance that all k of them do, C(c, k) / C(n, k). Invariant: both are exact for the n
attempts (no sampling), defined only for n >= k (None otherwise), and pass^1 == pass@1 == c / n.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float | None:
    _check(n, c, k)
    if n < k:
        return None
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    _check(n, c, k)
    if n < k:
        return None
    return comb(c, k) / comb(n, k)


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the defined values (None when there are none)."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
