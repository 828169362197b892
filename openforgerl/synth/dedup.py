"""Deduplication of candidate tasks: exact signatures, then MinHash LSH over the instructions.

- Exact: ``task_sig`` (domain, asset sha256, family, the family's normalised signature of the
  parameters) and ``verifier_sig`` (the compiled spec plus the asset's content hash) catch
  paraphrases of one task, which text similarity cannot.
- Near: normalised (NFKC, lower case, collapsed whitespace) character 5-gram shingles;
  ``datasketch.MinHash`` (num_perm 128, seed 1) into ``MinHashLSH``, which only *proposes* pairs: it
  is built for a lower threshold (``threshold - 0.2``: b = 25, r = 5 for 0.7), because an LSH tuned
  to 0.7 itself misses about 40 % of the pairs just above 0.7 (measured on template siblings);
  at 0.5 a pair at 0.7 is proposed with p = 1 - (1 - 0.7^5)^25 = 0.99. Every proposed pair is
  decided by the exact Jaccard of the shingle sets (>= threshold), and pairs are joined into clusters
  (union-find). Each cluster keeps one member: the one
  that got furthest, then the earliest proposed.
- ``exact_clusters`` does the same with all-pairs exact Jaccard (no datasketch): the fallback when
  datasketch is not installed, and the oracle the LSH is tested against.

Invariant: which candidates are kept depends only on their texts, signatures and proposal order,
never on hash-table iteration order.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SHINGLE = 5
NUM_PERM = 128
THRESHOLD = 0.7
LSH_MARGIN = 0.2
"""The LSH proposes pairs from ``threshold - LSH_MARGIN`` up (recall); exact Jaccard decides."""


ESTIMATE_MARGIN = 0.1
"""Proposed pairs whose MinHash estimate is below ``threshold - ESTIMATE_MARGIN`` are not checked exactly."""


def lsh_threshold(threshold: float) -> float:
    return max(threshold - LSH_MARGIN, 0.3)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def shingles(text: str, k: int = SHINGLE) -> set[str]:
    text = normalise(text)
    return {text[i:i + k] for i in range(max(len(text) - k + 1, 1))}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    common = len(a & b) if len(a) < len(b) else len(b & a)
    return common / (len(a) + len(b) - common)


class UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        found: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            found.setdefault(self.find(i), []).append(i)
        return sorted(found.values())


@dataclass
class Clusters:
    """Near-duplicate groups of texts (indices into the input), with the similar pairs found."""

    groups: list[list[int]]
    pairs: dict[tuple[int, int], float] = field(default_factory=dict)
    """(i, j) with i < j -> exact Jaccard, for every pair at or above the threshold."""
    method: str = "minhash-lsh"
    params: dict[str, Any] = field(default_factory=dict)

    def nearest(self, i: int) -> tuple[int | None, float]:
        best: tuple[int | None, float] = (None, 0.0)
        for (a, b), similarity in self.pairs.items():
            if i in (a, b) and similarity > best[1]:
                best = (b if a == i else a, similarity)
        return best


def lsh_clusters(texts: Sequence[str], threshold: float = THRESHOLD, num_perm: int = NUM_PERM) -> Clusters:
    """Near-duplicate clusters by MinHash LSH, every proposed pair decided by exact Jaccard.

    Proposed pairs whose MinHash estimate is below ``threshold - ESTIMATE_MARGIN`` are dropped before
    the exact check (all of a query's candidates in one vector comparison): the estimate's standard
    error at 0.7 is 0.04 with 128 permutations, so a pair at 0.7 is dropped with p ~ 0.007 and one
    at 0.75 with p < 1e-4 (measured: every pair found on the bench corpus, bench/results/synth.md)."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    sets = [shingles(t) for t in texts]
    hashes = MinHash.bulk([[s.encode() for s in sorted(one)] for one in sets], num_perm=num_perm, seed=1)
    matrix = np.stack([h.hashvalues for h in hashes]) if hashes else np.zeros((0, num_perm))
    lsh = MinHashLSH(threshold=lsh_threshold(threshold), num_perm=num_perm)
    found = UnionFind(len(texts))
    pairs: dict[tuple[int, int], float] = {}
    for i, minhash in enumerate(hashes):
        proposed = np.fromiter(lsh.query(minhash), dtype=np.int64)
        if proposed.size:
            estimate = (matrix[proposed] == matrix[i]).mean(axis=1)
            for j in sorted(proposed[estimate >= threshold - ESTIMATE_MARGIN].tolist()):
                similarity = jaccard(sets[i], sets[j])
                if similarity >= threshold:
                    pairs[(j, i)] = similarity
                    found.union(i, j)
        lsh.insert(i, minhash)
    return Clusters(found.groups(), pairs, "minhash-lsh",
                    {"shingle": f"char {SHINGLE}-gram", "num_perm": num_perm, "threshold": threshold,
                     "lsh_threshold": lsh_threshold(threshold), "b": lsh.b, "r": lsh.r,
                     "estimate_margin": ESTIMATE_MARGIN})


def exact_clusters(texts: Sequence[str], threshold: float = THRESHOLD) -> Clusters:
    """The same clusters by all-pairs exact Jaccard: O(n^2), fine up to a few thousand texts."""
    sets = [shingles(t) for t in texts]
    found = UnionFind(len(texts))
    pairs: dict[tuple[int, int], float] = {}
    for j in range(len(sets)):
        for i in range(j):
            similarity = jaccard(sets[i], sets[j])
            if similarity >= threshold:
                pairs[(i, j)] = similarity
                found.union(i, j)
    return Clusters(found.groups(), pairs, "exact-jaccard", {"shingle": f"char {SHINGLE}-gram", "threshold": threshold})


def near_clusters(texts: Sequence[str], threshold: float = THRESHOLD) -> Clusters:
    """LSH when datasketch is installed (the ``synth`` extra), else exact all-pairs Jaccard."""
    try:
        import datasketch  # noqa: F401
    except ImportError:
        return exact_clusters(texts, threshold)
    return lsh_clusters(texts, threshold)


def max_similarity(text: str, others: Sequence[str]) -> float:
    mine = shingles(text)
    return max((jaccard(mine, shingles(other)) for other in others), default=0.0)


class NearDuplicates:
    """The kept set, incrementally: is a new text a near duplicate of one already kept?

    With datasketch: an LSH index proposes kept texts, exact Jaccard decides; without it, every kept
    text is compared. Either way the answer is exact Jaccard >= ``threshold`` against some kept text."""

    def __init__(self, threshold: float = THRESHOLD, num_perm: int = NUM_PERM, use_lsh: bool = True) -> None:
        self.threshold, self.num_perm = threshold, num_perm
        self.keys: list[str] = []
        self.sets: list[set[str]] = []
        self._lsh: Any = None
        if use_lsh:
            try:
                from datasketch import MinHashLSH
            except ImportError:
                pass
            else:
                self._lsh = MinHashLSH(threshold=lsh_threshold(threshold), num_perm=num_perm)

    @property
    def method(self) -> str:
        return "minhash-lsh" if self._lsh is not None else "exact-jaccard"

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"shingle": f"char {SHINGLE}-gram", "threshold": self.threshold, "method": self.method}
        if self._lsh is not None:
            params.update(num_perm=self.num_perm, lsh_threshold=lsh_threshold(self.threshold), b=self._lsh.b,
                          r=self._lsh.r)
        return params

    def _minhash(self, one: set[str]) -> Any:
        from datasketch import MinHash

        minhash = MinHash(num_perm=self.num_perm, seed=1)
        minhash.update_batch([s.encode() for s in sorted(one)])
        return minhash

    def duplicate_of(self, text: str) -> tuple[str | None, float]:
        """(the most similar kept key at or above the threshold, its Jaccard), or (None, best below it)."""
        mine = shingles(text)
        if self._lsh is not None:
            indices = sorted(self._lsh.query(self._minhash(mine)))
        else:
            indices = list(range(len(self.sets)))
        best: tuple[str | None, float] = (None, 0.0)
        for i in indices:
            similarity = jaccard(mine, self.sets[i])
            if similarity > best[1]:
                best = (self.keys[i], similarity)
        return best if best[1] >= self.threshold else (None, best[1])

    def max_similarity(self, text: str) -> float:
        """Exact, against every kept text (for the record of a kept task)."""
        mine = shingles(text)
        return max((jaccard(mine, other) for other in self.sets), default=0.0)

    def add(self, key: str, text: str) -> None:
        one = shingles(text)
        if self._lsh is not None:
            self._lsh.insert(len(self.keys), self._minhash(one))
        self.keys.append(key)
        self.sets.append(one)
