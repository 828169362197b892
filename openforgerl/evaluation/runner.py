"""``forge eval``: the same rollouts as ``forge rollout``, for several harnesses, scored as the field
reports them (pass@k, pass^k, mean reward), with behaviour and cost summaries, into one directory.

Layout of an eval directory::

    D/config.yaml          the resolved EvalConfig
    D/<harness>/           one forge rollout run per harness (rollouts.jsonl, trajectories/, logs/...)
    D/eval.json            scores (per task, per harness, overall), behaviour and cost per harness

Invariant: every harness's run is prepared (tasks, harness installed, engine up, images) before
the first rollout starts, and eval.json is written from the rollout lines on disk even when the
run is interrupted — what it says is recomputable from the harness runs alone (``score_dir``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from openforgerl.config import save_resolved
from openforgerl.evaluation.behaviour import DEFINITIONS, aggregate, analyse
from openforgerl.evaluation.cost import by_harness
from openforgerl.evaluation.runs import EVAL, RunData, load_run
from openforgerl.evaluation.scores import final_tries, run_scores
from openforgerl.rollout.harnesses import HARNESSES, validate_harness_options
from openforgerl.rollout.orchestrator import OnResult, RolloutConfig
from openforgerl.rollout.proxy_handle import ProxyHandle
from openforgerl.rollout.run import PreparedRun, new_run_dir, prepare_run
from openforgerl.rollout.runtime import Runtime


class EvalConfig(RolloutConfig):
    """One ``forge eval`` run: a rollout config, run once per harness."""

    harnesses: list[str] = Field(default_factory=list)
    """Harnesses to evaluate (default: ``harness``)."""
    harness_options_for: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Options of one harness (over ``harness_options``, which every harness gets)."""
    ks: list[int] = Field(default_factory=lambda: [1])
    """The k of pass@k and pass^k; every k must be at most ``attempts``."""

    @model_validator(mode="after")
    def _eval_settings(self) -> EvalConfig:
        if not self.harnesses:
            self.harnesses = [self.harness]
        if len(set(self.harnesses)) != len(self.harnesses):
            raise ValueError(f"harnesses lists one twice: {self.harnesses}")
        if any(k < 1 for k in self.ks) or not self.ks:
            raise ValueError(f"ks must be positive, got {self.ks}")
        if max(self.ks) > self.attempts:
            raise ValueError(f"pass@{max(self.ks)} needs at least {max(self.ks)} attempts per task, attempts is "
                             f"{self.attempts} (give -n {max(self.ks)} or more)")
        for name in self.harnesses:
            if name in HARNESSES:
                validate_harness_options(name, self.options_for(name))
        return self

    def options_for(self, harness: str) -> dict[str, Any]:
        return {**self.harness_options, **self.harness_options_for.get(harness, {})}

    def rollout_config(self, harness: str, run_dir: Path) -> RolloutConfig:
        fields = {k: v for k, v in self.model_dump().items() if k in RolloutConfig.model_fields}
        fields.update(harness=harness, harness_options=self.options_for(harness), run_dir=str(run_dir / harness),
                      runtime=self.runtime)
        return RolloutConfig.model_validate(fields)


async def run_eval(config: EvalConfig, on_result: Callable[[str, int], OnResult] | None = None, *,
                   runtime: Runtime | None = None, proxy: ProxyHandle | None = None) -> tuple[Path, dict[str, Any]]:
    """Prepare every harness's run, run them one after another, write eval.json; returns (dir, eval).

    ``on_result(harness, rollouts)`` gives the callback for that harness's results; ``runtime`` and
    ``proxy`` replace the ones the config names (as for ``prepare_run``)."""
    run_dir = eval_dir(config)
    prepared: list[PreparedRun] = []
    for harness in config.harnesses:
        prepared.append(await prepare_run(config.rollout_config(harness, run_dir), runtime=runtime, proxy=proxy))
    save_resolved(config, run_dir)
    try:
        for run in prepared:
            await run.execute(on_result(run.harness.name, run.rollouts) if on_result else None)
    finally:
        evaluation = score_dir(run_dir, config.ks, model=config.model)
    return run_dir, evaluation


def eval_dir(config: EvalConfig) -> Path:
    if config.run_dir is None:
        config = config.model_copy(update={"run_dir": str(Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-eval"))})
    run_dir, _ = new_run_dir(config)
    return run_dir


def score_dir(run_dir: Path, ks: list[int], *, model: str | None = None) -> dict[str, Any]:
    """eval.json for the rollout runs under ``run_dir``, written there and returned."""
    data = load_run(run_dir)
    evaluation = evaluate(data, ks)
    evaluation["model"] = model
    (run_dir / EVAL).write_text(json.dumps(evaluation, indent=2))
    return evaluation


def evaluate(data: RunData, ks: list[int]) -> dict[str, Any]:
    """Scores, behaviour (aggregated per harness) and cost (per harness) of a loaded run."""
    results = data.results
    needed = data.needed_actions()
    behaviours: dict[str, list[Any]] = {}
    for result in final_tries(results):
        behaviour = analyse(data.trajectory(result), result, needed.get(result["task"]))
        behaviours.setdefault(behaviour.harness, []).append(behaviour)
    scores = run_scores(results, ks)
    return {**scores, "runs": {run.path.name: str(run.path.relative_to(data.path)) if run.path != data.path else "."
                               for run in data.runs},
            "behaviour": {h: aggregate(rows) for h, rows in sorted(behaviours.items())},
            "behaviour_definitions": DEFINITIONS, "cost": by_harness(results), "problems": data.problems}
