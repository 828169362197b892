"""The baseline check of a built task: ``nop`` must score <= nop_max, ``oracle`` >= oracle_min, and each
failure case the task ships (solution/failures/NAME.sh, run like the oracle) <= nop_max.

Both harnesses run ``repeats`` times each in real containers (``run_rollouts``); a task without
solution/solve.sh (an imported benchmark that ships no reference solution) is checked with nop only,
and its oracle is recorded as absent (no rewards, and a reason saying so). Invariant: a task
passes only when every repeat of both agrees with the bound *and* the repeats agree with each other;
a disagreement between repeats is reported as flaky even when each reward would pass on its own,
and every failure carries one sentence saying which run failed, how, and what that means.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from openforgerl.rollout.orchestrator import NetworkMode, RolloutConfig, RolloutResult, final_tries
from openforgerl.rollout.run import run_rollouts
from openforgerl.tasks import SOLUTION_SCRIPT

LOG_TAIL = 2000
FAILURES_DIR = "solution/failures"
NO_ORACLE = f"oracle: none (the task has no {SOLUTION_SCRIPT}); validated with nop only"


@dataclass
class HarnessCheck:
    """What the repeats of one harness scored and whether that passes."""

    harness: str
    rewards: list[float | None]
    statuses: list[str]
    ok: bool
    reason: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    """Rollout id -> reason, solve.sh output and verifier files, for the repairer."""


@dataclass
class Baselines:
    nop: HarnessCheck
    oracle: HarnessCheck
    failures: dict[str, HarnessCheck] = field(default_factory=dict)
    """Failure case name (solution/failures/NAME.sh) -> its check: each must score at most nop_max."""

    @property
    def ok(self) -> bool:
        return self.nop.ok and self.oracle.ok and all(c.ok for c in self.failures.values())

    @property
    def reason(self) -> str:
        """Why the check failed, and what it could not check (an absent oracle); empty when neither."""
        checks = [self.nop, self.oracle, *self.failures.values()]
        return "; ".join(c.reason for c in checks if c.reason)


def failure_scripts(task_dir: Path) -> list[str]:
    """The task's failure cases: scripts under solution/failures/ that do the task wrong (the wrong item,
    the right thing plus collateral damage, tampering with the tests), each of which must score 0."""
    folder = task_dir / FAILURES_DIR
    return sorted(p.stem for p in folder.glob("*.sh")) if folder.is_dir() else []


def check_bounds(harness: str, results: list[RolloutResult], limit: float) -> tuple[bool, str]:
    """Whether the repeats of ``harness`` pass its bound (nop: <= limit, oracle: >= limit), and why not."""
    what = "doing nothing (nop)" if harness == "nop" else "the reference solution (oracle)"
    broken = [r for r in results if r.status in ("infra_error", "verifier_error")
              or (harness != "nop" and r.status == "agent_timeout")]
    if broken:
        first = broken[0]
        kind = {"infra_error": "an infrastructure error", "verifier_error": "the verifier crashed",
                "agent_timeout": "the script ran past the agent timeout"}[first.status]
        return False, f"{harness} check: {kind} in {len(broken)}/{len(results)} repeats: {first.reason}".rstrip(": ")
    rewards = [r.reward for r in results]
    if len(set(rewards)) > 1:
        return False, (f"{harness} check: flaky: {what} scored {_fmt(rewards)} across {len(results)} repeats "
                       "(repeats must agree)")
    at_most = harness == "nop" or harness.startswith("failure")
    bad = [r for r in rewards if r is None or (r > limit if at_most else r < limit)]
    if not bad:
        return True, ""
    if harness.startswith("failure"):
        return False, (f"{harness} check: the script scored {_fmt(rewards)} > nop_max {limit:g} in {len(bad)}/"
                       f"{len(results)} repeats: the verifier rewards doing the task wrong")
    if harness == "nop":
        return False, (f"nop check: {what} scored {_fmt(rewards)} > nop_max {limit:g} in {len(bad)}/{len(results)} "
                       "repeats: the verifier passes without the task being done")
    hung = next((r.reason for r in results if r.sandbox.get("verifier_timeout")), "")
    return False, (f"oracle check: {what} scored {_fmt(rewards)} < oracle_min {limit:g} in {len(bad)}/{len(results)} "
                   "repeats: the solution does not solve the task, or the verifier rejects a correct solution"
                   + (f" ({hung})" if hung else ""))


def _fmt(rewards: list[float | None]) -> str:
    return "[" + ", ".join("none" if r is None else f"{r:g}" for r in rewards) + "]"


async def run_baselines(task_dir: Path, run_dir: Path, *, repeats: int, nop_max: float, oracle_min: float,
                        agent_user: str | None = None, network: NetworkMode = "isolated") -> Baselines:
    if not (task_dir / SOLUTION_SCRIPT).is_file():
        nop = await _check(task_dir, run_dir, "nop", repeats, nop_max, agent_user, network)
        return Baselines(nop, HarnessCheck("oracle", [], [], True, NO_ORACLE))
    names = failure_scripts(task_dir)
    nop, oracle, *failures = await asyncio.gather(
        _check(task_dir, run_dir, "nop", repeats, nop_max, agent_user, network),
        _check(task_dir, run_dir, "oracle", repeats, oracle_min, agent_user, network),
        *(_check(task_dir, run_dir, f"failure {name}", repeats, nop_max, agent_user, network) for name in names))
    return Baselines(nop, oracle, dict(zip(names, failures, strict=True)))


async def _check(task_dir: Path, run_dir: Path, label: str, repeats: int, limit: float,
                 agent_user: str | None, network: NetworkMode) -> HarnessCheck:
    # pass_threshold only labels success/failure; check_bounds() reads the rewards themselves.
    harness, options, folder = label, {}, label
    if label.startswith("failure "):  # a failure case is the oracle harness running another script
        name = label.removeprefix("failure ")
        harness, options, folder = "oracle", {"script": f"failures/{name}.sh"}, f"failure-{name}"
    config = RolloutConfig(tasks=[str(task_dir)], harness=harness, harness_options=options, attempts=repeats,
                           concurrency=repeats, run_dir=str(run_dir / folder), pass_threshold=limit,
                           agent_user=agent_user, network=network)
    out, results = await run_rollouts(config)
    results = sorted(final_tries(results), key=lambda r: r.attempt)
    ok, reason = check_bounds(label, results, limit)
    logs = {} if ok else {r.rollout_id: _rollout_log(out, r) for r in results}
    return HarnessCheck(label, [r.reward for r in results], [r.status for r in results], ok, reason, logs)


def _rollout_log(run_dir: Path, result: RolloutResult) -> str:
    """What the repairer sees of one rollout: status, reason, the harness's output and the verifier's files."""
    parts = [f"status={result.status} reward={result.reward} reason={result.reason or '-'}"]
    folder = run_dir / "logs" / result.rollout_id
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file() and path.stat().st_size:
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.relative_to(folder)} ---\n{text[-LOG_TAIL:]}")
    return "\n".join(parts)
