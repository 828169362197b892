"""Where the time and tokens of a run went: per rollout, then totals per harness.

Per rollout (from its line of rollouts.jsonl: the orchestrator's phase timings and the proxy's
per-call telemetry summed in ``model_usage``), in seconds:

- ``container_start``: sandbox up (image pulled and started, network joined);
- ``model``: the engine generating (``engine_ms``); ``queueing``: calls waiting for the engine;
  ``proxy_overhead``: the proxy's own work per call (planning the prompt, recording);
- ``agent``: the harness's own time — its wall time less the model calls it waited on (tools,
  the harness's start-up and thinking between calls);
- ``seal`` (ending the agent's processes, the integrity check), ``verifier``, ``logs`` (copying the
  sandbox's /logs out), ``teardown`` (removing the sandbox);
- ``other``: the rest of the rollout's wall time (opening and closing the proxy rollout, saving
  the trajectory).

Invariant: the phases of a rollout add up to its ``total`` (``other`` takes the remainder, never
below 0), so a breakdown's shares are of real wall time. Tokens: in (prompt, reused prefix
included), out (generated), reused (prompt tokens copied from an earlier call of the rollout).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PHASES = ("container_start", "agent", "model", "queueing", "proxy_overhead", "seal", "verifier", "logs", "teardown",
          "other")
TOKENS = ("tokens_in", "tokens_out", "tokens_reused")


def rollout_cost(result: dict[str, Any]) -> dict[str, float]:
    timings, usage = result.get("timings") or {}, result.get("model_usage") or {}
    model = usage.get("engine_ms", 0) / 1000
    queueing = usage.get("queue_ms", 0) / 1000
    overhead = usage.get("overhead_ms", 0) / 1000
    in_calls = usage.get("total_ms", (usage.get("engine_ms", 0) + usage.get("queue_ms", 0)
                                      + usage.get("overhead_ms", 0))) / 1000
    harness = timings.get("harness_s", 0.0)
    cost = {"container_start": timings.get("container_start_s", 0.0), "agent": max(harness - in_calls, 0.0),
            "model": model, "queueing": queueing, "proxy_overhead": overhead,
            "seal": timings.get("seal_s", 0.0), "verifier": timings.get("verifier_s", 0.0),
            "logs": timings.get("logs_s", 0.0), "teardown": timings.get("teardown_s", 0.0)}
    total = timings.get("total_s", sum(cost.values()))
    cost["other"] = max(total - sum(cost.values()), 0.0)
    cost["total"] = max(total, sum(cost.values()))
    cost.update({key: float(usage.get(key, 0)) for key in TOKENS})
    cost["calls"] = float(usage.get("calls", 0))
    return {key: round(value, 3) for key, value in cost.items()}


def totals(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Sums over every try (infra errors and retries cost time too), each phase's share of the total,
    rollouts, retries, and the mean per rollout."""
    rows = list(results)
    summed: dict[str, float] = {}
    for result in rows:
        for key, value in rollout_cost(result).items():
            summed[key] = round(summed.get(key, 0.0) + value, 3)
    total = summed.get("total", 0.0)
    return {"rollouts": len(rows), "retries": sum(1 for r in rows if r.get("try_index", 0) > 0),
            "seconds": {phase: summed.get(phase, 0.0) for phase in (*PHASES, "total")},
            "share": {phase: round(summed.get(phase, 0.0) / total, 4) if total else None for phase in PHASES},
            "tokens": {key: int(summed.get(key, 0)) for key in TOKENS},
            "calls": int(summed.get("calls", 0)),
            "per_rollout_s": round(total / len(rows), 3) if rows else None}


def by_harness(results: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(result.get("harness", ""), []).append(result)
    return {harness: totals(rows) for harness, rows in sorted(groups.items())}
