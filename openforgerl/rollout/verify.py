"""Running a task's verifier after the agent, from a state the agent could not have prepared.

Invariant: before ``tests/test.sh`` runs, ``/logs/verifier`` and ``/tests`` are deleted and
recreated by root from the task directory on the host, so a reward file or a test script the
agent planted is gone; the reward is read only from what the verifier wrote in this run.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforgerl.rollout.runtime import ExecResult, Sandbox
from openforgerl.tasks import Task

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"


@dataclass
class Verdict:
    """What the verifier decided. ``error`` set means it could not decide (verifier_error)."""

    reward: float | None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    output: ExecResult | None = None


async def run_verifier(sandbox: Sandbox, task: Task, timeout: float, workdir: str = "/app") -> Verdict:
    reset = await sandbox.exec(["sh", "-c", f"rm -rf {VERIFIER_DIR} {TESTS_DIR} && mkdir -p {VERIFIER_DIR} {workdir}"],
                               user="0", timeout=60)
    if not reset.ok:
        return Verdict(None, error=f"could not reset {VERIFIER_DIR}: {reset.tail()}")
    await sandbox.put(task.tests_dir, "/")
    result = await sandbox.exec(["bash", f"{TESTS_DIR}/test.sh"], user="0", timeout=timeout, cwd=workdir,
                                env=task.config.verifier.env)
    if result.timed_out:
        return Verdict(None, error=f"verifier timed out after {timeout:.0f} s", seconds=result.seconds, output=result)
    verdict = await _read_reward(sandbox)
    verdict.seconds, verdict.output = result.seconds, result
    if verdict.error and result.exit_code != 0:
        verdict.error += f" (test.sh exit {result.exit_code}: {result.tail(300)})"
    return verdict


async def _read_reward(sandbox: Sandbox) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="forge-verdict-") as tmp:
        try:
            await sandbox.get(VERIFIER_DIR, Path(tmp))
        except Exception as exc:  # the directory vanished: the verifier (or something) removed it
            return Verdict(None, error=f"{VERIFIER_DIR} is gone after the verifier ran: {exc}")
        folder = Path(tmp) / Path(VERIFIER_DIR).name
        return parse_reward_files(folder)


def parse_reward_files(folder: Path) -> Verdict:
    """reward.json ``{"reward": number, ...metrics}`` wins; else reward.txt holding one number."""
    as_json, as_text = folder / "reward.json", folder / "reward.txt"
    if as_json.is_file():
        try:
            data = json.loads(as_json.read_text())
        except ValueError as exc:
            return Verdict(None, error=f"reward.json is not JSON: {exc}")
        if not isinstance(data, dict) or "reward" not in data:
            return Verdict(None, error='reward.json must be an object with a "reward" number')
        return _checked(data.pop("reward"), data)
    if as_text.is_file():
        text = as_text.read_text().strip()
        try:
            return _checked(float(text), {})
        except ValueError:
            return Verdict(None, error=f"reward.txt does not hold a number: {text[:80]!r}")
    return Verdict(None, error="the verifier wrote neither reward.json nor reward.txt")


def _checked(value: Any, metrics: dict[str, Any]) -> Verdict:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return Verdict(None, metrics, error=f"reward must be a finite number, got {value!r}")
    return Verdict(float(value), metrics)
