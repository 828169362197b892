"""Two runs side by side: per-task deltas and a paired test of the difference (``forge report A B``).

The unit of pairing is the task (per harness when both runs ran several harnesses; by task alone
when each ran one, so two harnesses or two checkpoints on the same tasks compare directly). Per
pair: pass@1 (the success rate over counted attempts) and mean reward in each run, and B - A.

Two tests of "B differs from A", both exact and assumption-light, over the pairs' pass@1 deltas:
- the sign test: of the tasks that changed, how many improved; two-sided binomial p at 1/2;
- the paired permutation (sign-flip) test: under no difference each delta's sign is a coin flip;
  p is the share of the 2^m sign assignments whose |sum| is at least the observed one (exact up
  to ``EXACT_UP_TO`` changed tasks, else ``SAMPLES`` random assignments with a fixed seed).

Invariant: pairs are only made from tasks both runs counted (n > 0); the rest are listed apart.
"""

from __future__ import annotations

import itertools
import random
from math import comb
from typing import Any

from openforgerl.evaluation.estimators import mean
from openforgerl.evaluation.scores import run_scores

EXACT_UP_TO = 16
SAMPLES = 20_000


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]], *, name_a: str = "A", name_b: str = "B") -> dict:
    """``a`` / ``b``: the rollouts.jsonl lines of each run."""
    scores_a, scores_b = run_scores(a, [1])["harnesses"], run_scores(b, [1])["harnesses"]
    by_task = len(scores_a) == 1 and len(scores_b) == 1
    flat_a, flat_b = _flatten(scores_a, by_task), _flatten(scores_b, by_task)
    pairs = []
    for key in sorted(set(flat_a) & set(flat_b)):
        left, right = flat_a[key], flat_b[key]
        if not left["n"] or not right["n"]:
            continue
        pairs.append({"harness": key[0], "task": key[1],
                      "a": _brief(left), "b": _brief(right),
                      "delta_pass@1": right["pass@1"] - left["pass@1"],
                      "delta_reward": (right["mean_reward"] or 0.0) - (left["mean_reward"] or 0.0)})
    deltas = [p["delta_pass@1"] for p in pairs]
    paired = {(p["harness"], p["task"]) for p in pairs}
    return {"a": name_a, "b": name_b, "paired_by": "task" if by_task else "harness and task", "pairs": pairs,
            "only_a": [list(k) for k in sorted(set(flat_a) - paired)],
            "only_b": [list(k) for k in sorted(set(flat_b) - paired)],
            "mean_delta_pass@1": mean(deltas), "mean_delta_reward": mean(p["delta_reward"] for p in pairs),
            "sign_test": sign_test(deltas), "permutation_test": permutation_test(deltas)}


def sign_test(deltas: list[float]) -> dict[str, Any]:
    better, worse = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
    m = better + worse
    if m == 0:
        return {"better": 0, "worse": 0, "ties": len(deltas), "p": None}
    tail = sum(comb(m, i) for i in range(0, min(better, worse) + 1)) / 2 ** m
    return {"better": better, "worse": worse, "ties": len(deltas) - m, "p": min(1.0, 2 * tail)}


def permutation_test(deltas: list[float], seed: int = 0) -> dict[str, Any]:
    changed = [d for d in deltas if d != 0]
    if not changed:
        return {"p": None, "method": "no task changed"}
    observed = abs(sum(changed)) - 1e-12
    if len(changed) <= EXACT_UP_TO:
        signs = itertools.product((1, -1), repeat=len(changed))
        hits = sum(abs(sum(s * d for s, d in zip(sign, changed, strict=True))) >= observed for sign in signs)
        return {"p": hits / 2 ** len(changed), "method": "exact"}
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in changed)) >= observed for _ in range(SAMPLES))
    return {"p": (hits + 1) / (SAMPLES + 1), "method": f"{SAMPLES} random sign flips"}


def _flatten(harnesses: dict[str, Any], by_task: bool) -> dict[tuple[str, str], dict[str, Any]]:
    return {("*" if by_task else harness, task): scores
            for harness, entry in harnesses.items() for task, scores in entry["tasks"].items()}


def _brief(scores: dict[str, Any]) -> dict[str, Any]:
    return {"n": scores["n"], "pass@1": scores["pass@1"], "mean_reward": scores["mean_reward"]}
