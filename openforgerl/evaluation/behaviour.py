"""How an agent behaved in a rollout: pure functions of its trajectory (the proxy's record) and result.

Each metric has its definition in ``DEFINITIONS`` (shown in reports beside the numbers). Per
rollout, ``analyse`` gives a ``Behaviour``; ``aggregate`` averages a group of them (a harness, a
run): rates over the rollouts where a metric is defined, totals for counts.

Invariant: a metric a rollout gives no evidence for is None (not 0) and is left out of averages —
a rollout without a write has no self-verification rate, one without a failed call no recovery.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from openforgerl.evaluation.actions import CHECK_KINDS, Action, actions
from openforgerl.evaluation.estimators import mean

LOOP_LENGTH = 3
"""This many identical calls in a row are a loop."""

DEFINITIONS: dict[str, str] = {
    "turns": "Model calls the rollout made (answered ones).",
    "tokens_in": "Prompt tokens over all its calls (reused prefix included).",
    "tokens_out": "Tokens the model generated over all its calls.",
    "tool_calls": "Tool calls the model made.",
    "tool_coverage": "Distinct tools used, of the tools the harness offered.",
    "needed_coverage": "Of the action kinds the task declares needed ([task] needed_actions), the share used.",
    "self_verified": "After its last write (a file write, edit, patch, or a shell command that writes), "
                     "the agent read back, listed, searched, ran tests or ran a command before it stopped. "
                     "Undefined when it wrote nothing.",
    "errors": "Tool calls whose result says they failed: a non-zero exit, an error message, an exception.",
    "recovered": "Failed calls followed later by a successful call with the same goal (same kind of effect "
                 "on the same target or program).",
    "error_recovery": "recovered / errors, counted only when the rollout also ended by itself (not a "
                      "timeout or an infra error). Undefined when no call failed.",
    "plan_completion": "For verifiers with several checks: the share of checks fully satisfied.",
    "premature_finish": "The agent stopped by itself (exit 0, no timeout) while the verifier found the task "
                        "not done.",
    "repeated_calls": "Calls identical to the call just before them (same tool, same arguments).",
    "loop": f"The rollout made {LOOP_LENGTH} or more identical calls in a row.",
}


@dataclass
class Behaviour:
    """One rollout's behaviour metrics (see ``DEFINITIONS``)."""

    rollout_id: str
    task: str
    harness: str
    status: str
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    tools_offered: list[str] = field(default_factory=list)
    tool_coverage: float | None = None
    needed_coverage: float | None = None
    self_verified: bool | None = None
    errors: int = 0
    recovered: int = 0
    error_recovery: float | None = None
    plan_completion: float | None = None
    premature_finish: bool | None = None
    repeated_calls: int = 0
    loop: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyse(trajectory: dict[str, Any] | None, result: dict[str, Any],
            needed: list[str] | None = None) -> Behaviour:
    """``trajectory``: the saved trajectory (or its summary) — None for a harness that calls no model;
    ``result``: the rollout's line of rollouts.jsonl; ``needed``: the action kinds the task needs."""
    behaviour = Behaviour(result.get("rollout_id", ""), result.get("task", ""), result.get("harness", ""),
                          result.get("status", ""))
    calls = (trajectory or {}).get("calls", [])
    done = actions(calls)
    _counts(behaviour, calls, done)
    _coverage(behaviour, calls, done, needed)
    behaviour.self_verified = self_verified(done)
    _recovery(behaviour, done)
    behaviour.plan_completion = plan_completion(result.get("metrics") or {})
    behaviour.premature_finish = premature_finish(result)
    behaviour.repeated_calls, behaviour.loop = repeats(done)
    return behaviour


def self_verified(done: list[Action]) -> bool | None:
    """Whether a check (read, list, search, test, run, observe) follows the last write; None without writes."""
    steps = [kind for action in done for kind in action.kinds]
    if "write" not in steps:
        return None
    last_write = len(steps) - 1 - steps[::-1].index("write")
    return any(kind in CHECK_KINDS for kind in steps[last_write + 1:])


def recovered_errors(done: list[Action]) -> tuple[int, int]:
    """(failed calls, those followed by a successful call with the same goal)."""
    failed = [i for i, action in enumerate(done) if action.error]
    recovered = sum(any(later.goal == done[i].goal and later.result is not None and not later.error
                        for later in done[i + 1:]) for i in failed)
    return len(failed), recovered


def plan_completion(metrics: dict[str, Any]) -> float | None:
    """The share of a verifier's checks scored 1, when it has two or more (``metrics["checks"]``: name ->
    score, or name -> {"reward": score, ...} as forge_verify writes them)."""
    checks = metrics.get("checks")
    if not isinstance(checks, dict) or len(checks) < 2:
        return None
    scores = [_score(value) for value in checks.values()]
    return sum(score >= 1.0 - 1e-9 for score in scores) / len(scores)


def premature_finish(result: dict[str, Any]) -> bool | None:
    """None for rollouts that did not get as far as a verdict on the policy's work."""
    if result.get("status") not in ("success", "failure"):
        return None
    return result.get("status") == "failure" and result.get("harness_exit_code") == 0 and \
        not result.get("sandbox", {}).get("tampered")


def repeats(done: list[Action]) -> tuple[int, bool]:
    repeated, run, loop = 0, 1, False
    for before, action in zip(done, done[1:], strict=False):
        same = action.key == before.key
        repeated += same
        run = run + 1 if same else 1
        loop = loop or run >= LOOP_LENGTH
    return repeated, loop


def aggregate(rows: list[Behaviour]) -> dict[str, Any]:
    """Means (rates for booleans) over the rollouts where each metric is defined; summed tool counts."""
    out: dict[str, Any] = {"rollouts": len(rows)}
    for name in ("turns", "tokens_in", "tokens_out", "tool_calls", "tool_coverage", "needed_coverage",
                 "error_recovery", "plan_completion", "repeated_calls"):
        out[name] = mean(getattr(row, name) for row in rows)
    for name in ("self_verified", "premature_finish", "loop"):
        out[name] = mean(None if getattr(row, name) is None else float(getattr(row, name)) for row in rows)
    out["errors"] = sum(row.errors for row in rows)
    out["recovered"] = sum(row.recovered for row in rows)
    out["by_tool"] = dict(sum((Counter(row.by_tool) for row in rows), Counter()).most_common())
    out["by_kind"] = dict(sum((Counter(row.by_kind) for row in rows), Counter()).most_common())
    return out


def _counts(behaviour: Behaviour, calls: list[dict[str, Any]], done: list[Action]) -> None:
    answered = [c for c in calls if c.get("status") == "ok"]
    behaviour.turns = len(answered)
    behaviour.tokens_in = int(sum(c.get("tokens_in", 0) for c in calls))
    behaviour.tokens_out = int(sum(c.get("tokens_out", 0) for c in calls))
    behaviour.tool_calls = len(done)
    behaviour.by_tool = dict(Counter(a.tool for a in done).most_common())
    behaviour.by_kind = dict(Counter(k for a in done for k in a.kinds).most_common())


def _coverage(behaviour: Behaviour, calls: list[dict[str, Any]], done: list[Action],
              needed: list[str] | None) -> None:
    offered = sorted({name for c in calls for name in (c.get("digest") or {}).get("offered", []) if name})
    behaviour.tools_offered = offered
    if offered:
        behaviour.tool_coverage = len({a.tool for a in done} & set(offered)) / len(offered)
    if needed:
        used = {kind for a in done for kind in a.kinds}
        behaviour.needed_coverage = len(set(needed) & used) / len(set(needed))


def _recovery(behaviour: Behaviour, done: list[Action]) -> None:
    behaviour.errors, behaviour.recovered = recovered_errors(done)
    ended_by_itself = behaviour.status in ("success", "failure")
    if behaviour.errors and ended_by_itself:
        behaviour.error_recovery = behaviour.recovered / behaviour.errors


def _score(value: Any) -> float:
    if isinstance(value, dict):
        value = value.get("reward", value.get("score", 0.0))
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
