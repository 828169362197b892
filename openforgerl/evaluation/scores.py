"""pass@k, pass^k and mean reward of a run's rollouts: per task, per harness, overall.

Which rollouts count: the final try of each (task, attempt) (infra retries done). ``infra_error``,
``cancelled`` and ``verifier_error`` rollouts say nothing about the policy: they are left out of n
and counted apart. A ``success`` is a pass; every other counted status (``failure``,
``agent_timeout``) a fail. Per harness, ``overall`` is the mean over its tasks of each task's
estimate (tasks with fewer counted attempts than k have none for that k and are left out of it, and
counted in ``short``); the run's ``overall`` is the same mean over every (harness, task).

Invariant: the keys are named as the field writes them — ``pass@1``, ``pass@3``, ``pass^3`` —
and every number is recomputable from rollouts.jsonl alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from openforgerl.evaluation.estimators import mean, pass_at_k, pass_hat_k

EXCLUDED = ("infra_error", "cancelled", "verifier_error")


def final_tries(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last try of each (harness, task, attempt), in first-seen order."""
    final: dict[tuple[str, str, int], dict[str, Any]] = {}
    for result in results:
        key = (result.get("harness", ""), result["task"], result.get("attempt", 0))
        if key not in final or result.get("try_index", 0) >= final[key].get("try_index", 0):
            final[key] = result
    return list(final.values())


def task_scores(results: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """One (harness, task) group's estimates from its final tries."""
    counted = [r for r in results if r["status"] not in EXCLUDED]
    n, c = len(counted), sum(r["status"] == "success" for r in counted)
    scores: dict[str, Any] = {"n": n, "successes": c}
    for k in ks:
        scores[f"pass@{k}"] = pass_at_k(n, c, k)
    for k in ks:
        if k > 1:
            scores[f"pass^{k}"] = pass_hat_k(n, c, k)
    scores["mean_reward"] = mean(r.get("reward") if r.get("reward") is not None else 0.0 for r in counted)
    for status in EXCLUDED:
        scores[status] = sum(r["status"] == status for r in results)
    return scores


def run_scores(results: Iterable[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """``{"ks", "harnesses": {h: {"overall", "tasks": {t: scores}}}, "overall"}`` over final tries."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for result in final_tries(results):
        groups.setdefault(result.get("harness", ""), {}).setdefault(result["task"], []).append(result)
    harnesses = {}
    every: list[dict[str, Any]] = []
    for harness, tasks in sorted(groups.items()):
        per_task = {task: task_scores(rows, ks) for task, rows in sorted(tasks.items())}
        every += per_task.values()
        harnesses[harness] = {"overall": overall(per_task.values(), ks), "tasks": per_task}
    return {"ks": list(ks), "harnesses": harnesses, "overall": overall(every, ks)}


def overall(per_task: Iterable[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    rows = list(per_task)
    out: dict[str, Any] = {"tasks": len(rows), "n": sum(r["n"] for r in rows)}
    keys = [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks if k > 1] + ["mean_reward"]
    for key in keys:
        out[key] = mean(r[key] for r in rows)
    out["short"] = {f"k={k}": sum(r["n"] < k for r in rows) for k in ks if any(r["n"] < k for r in rows)}
    for status in EXCLUDED:
        out[status] = sum(r[status] for r in rows)
    return out
