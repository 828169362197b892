"""Reading run directories back: a ``forge rollout`` run, or a ``forge eval`` run (one rollout run
per harness under it, and eval.json).

Invariant: reading never changes a run directory, and a run that was interrupted (a last line cut
short, a trajectory never written) still loads: what is broken is named in ``problems``, the
rest is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from openforgerl.errors import UserError
from openforgerl.rollout.run import load_tasks

ROLLOUTS = "rollouts.jsonl"
EVAL = "eval.json"


@dataclass
class RolloutRun:
    """One directory with a rollouts.jsonl."""

    path: Path
    results: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    path: Path
    runs: list[RolloutRun]
    eval: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def results(self) -> list[dict[str, Any]]:
        return [r for run in self.runs for r in run.results]

    def trajectory(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """The saved trajectory of a rollout, None if it has none (no model calls, or never written)."""
        run = self.run_of(result)
        if not result.get("trajectory") or run is None:
            return None
        path = run.path / result["trajectory"]
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        except (OSError, ValueError):
            return None

    def run_of(self, result: dict[str, Any]) -> RolloutRun | None:
        return next((run for run in self.runs if any(r is result for r in run.results)), None)

    def needed_actions(self) -> dict[str, list[str]]:
        """Task name -> its ``[task] needed_actions``, for the tasks whose directories still load."""
        needed: dict[str, list[str]] = {}
        for run in self.runs:
            try:
                tasks = load_tasks([str(p) for p in run.config.get("tasks", [])])
            except Exception:  # tasks moved or changed since the run: they have no needs to report
                continue
            needed.update({t.name: list(t.config.task.needed_actions) for t in tasks if t.config.task.needed_actions})
        return needed


def load_run(path: str | Path) -> RunData:
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"{root} is not a directory", fix="pass a run directory (forge rollout / forge eval wrote it)")
    problems: list[str] = []
    dirs = [root] if (root / ROLLOUTS).is_file() else sorted(p.parent for p in root.glob(f"*/{ROLLOUTS}"))
    if not dirs:
        raise UserError(f"{root} holds no {ROLLOUTS} (nor does any directory in it)",
                        fix="pass the directory forge rollout or forge eval printed at the end of its run")
    runs = [_rollout_run(d, problems) for d in dirs]
    evaluation = None
    if (root / EVAL).is_file():
        try:
            evaluation = json.loads((root / EVAL).read_text())
        except ValueError as exc:
            problems.append(f"{root / EVAL}: not JSON ({exc})")
    return RunData(root, runs, evaluation, problems)


def _rollout_run(path: Path, problems: list[str]) -> RolloutRun:
    results = []
    for number, line in enumerate((path / ROLLOUTS).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            results.append(json.loads(line))
        except ValueError:
            problems.append(f"{path / ROLLOUTS}:{number}: not JSON (a line cut short by an interrupted run?)")
    config: dict[str, Any] = {}
    if (path / "config.yaml").is_file():
        try:
            config = yaml.safe_load((path / "config.yaml").read_text()) or {}
        except yaml.YAMLError as exc:
            problems.append(f"{path / 'config.yaml'}: {exc}")
    summary: dict[str, Any] = {}
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except ValueError:
            problems.append(f"{path / 'summary.json'}: not JSON")
    return RolloutRun(path, results, config, summary)
