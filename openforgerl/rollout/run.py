"""``forge rollout``: a whole run — tasks, runtime, proxy, orchestrator, progress, summary, run dir.

Invariant: the run directory holds everything needed to understand the run afterwards: the
resolved config, one line per rollout in rollouts.jsonl (written as each ends), the trajectories,
the harness and verifier logs, and summary.json.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforgerl.config import save_resolved
from openforgerl.errors import UserError
from openforgerl.manifest import published_tasks
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.harnesses import make_harness
from openforgerl.rollout.harnesses.install import installed
from openforgerl.rollout.orchestrator import STATUSES, OnResult, Orchestrator, RolloutConfig, RolloutResult, final_tries
from openforgerl.rollout.proxy_handle import ProxyHandle, check_engine, open_proxy
from openforgerl.rollout.runtime import Runtime
from openforgerl.rollout.runtimes import make_runtime
from openforgerl.tasks import Task, find_task_dirs


def load_tasks(paths: list[str]) -> list[Task]:
    """Task dirs, dirs of task dirs, or a build-env manifest.jsonl (its published tasks, last entry wins)."""
    dirs: list[str | Path] = []
    for path in paths:
        if path.endswith(".jsonl") and Path(path).is_file():
            dirs += published_tasks(Path(path))
        else:
            dirs.append(path)
    return [Task.load(path) for path in find_task_dirs(dirs)]


def new_run_dir(config: RolloutConfig) -> tuple[Path, str]:
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{config.harness}"
    run_dir = Path(config.run_dir) if config.run_dir else Path("runs") / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, run_dir.name


@dataclass
class PreparedRun:
    """A run whose tasks, harness and runtime are loaded and checked: nothing has started yet."""

    config: RolloutConfig
    tasks: list[Task]
    harness: Harness
    runtime: Runtime
    proxy: ProxyHandle | None = None

    @property
    def rollouts(self) -> int:
        """Rollouts the run makes before any infra retry."""
        return len(self.tasks) * self.config.attempts

    async def execute(self, on_result: OnResult | None = None) -> tuple[Path, list[RolloutResult]]:
        run_dir, run_id = new_run_dir(self.config)
        save_resolved(self.config, run_dir)
        await self.runtime.sweep()
        async with _proxy_for(self.config, self.harness, run_dir, self.proxy) as handle:
            orchestrator = Orchestrator(self.config, self.runtime, self.harness, handle, run_dir, run_id, on_result)
            results = await orchestrator.run(self.tasks)
        (run_dir / "summary.json").write_text(json.dumps(summarize(results), indent=2))
        return run_dir, results


async def prepare_run(config: RolloutConfig, harness: Harness | None = None, runtime: Runtime | None = None,
                      proxy: ProxyHandle | None = None) -> PreparedRun:
    """Load and check what ``config`` names; ``harness`` / ``runtime`` / ``proxy`` replace the ones it
    names (custom adapters, a proxy the caller runs, tests).

    Everything that would fail every rollout is checked here (``preflight``), so a broken setup is
    one line with its fix before any sandbox starts, not N infra errors."""
    tasks = load_tasks(config.tasks)
    harness = harness or make_harness(config.harness, **config.harness_options)
    runtime = runtime or make_runtime(config.runtime)
    await preflight(config, tasks, harness, runtime, check_model=proxy is None)
    return PreparedRun(config, tasks, harness, runtime, proxy)


async def run_rollouts(config: RolloutConfig, on_result: OnResult | None = None, harness: Harness | None = None,
                       runtime: Runtime | None = None,
                       proxy: ProxyHandle | None = None) -> tuple[Path, list[RolloutResult]]:
    """``prepare_run`` then ``execute``: the whole of ``forge rollout`` without its display."""
    prepared = await prepare_run(config, harness, runtime, proxy)
    return await prepared.execute(on_result)


def _proxy_for(config: RolloutConfig, harness: Harness, run_dir: Path,
               given: ProxyHandle | None) -> contextlib.AbstractAsyncContextManager[ProxyHandle | None]:
    """The caller's proxy, else the one ``config.proxy`` names (started in-run), or none for a harness
    that calls no model."""
    if not harness.uses_model:
        return _no_proxy()
    if given is not None:
        return contextlib.nullcontext(given)
    return open_proxy(config.proxy, config.model, run_dir / "proxy")


async def preflight(config: RolloutConfig, tasks: list[Task], harness: Harness, runtime: Runtime, *,
                    check_model: bool = True) -> None:
    """Raise one ForgeError (what, and the fix) for anything that would fail every rollout of this run:
    no tasks, the harness not installed, the model engine not answering, images the runtime cannot have."""
    if not tasks:
        raise UserError(f"no task directories in {', '.join(config.tasks)}",
                        fix="pass task directories (each holds a task.toml) or a build-env manifest.jsonl")
    if harness.tool is not None and harness.tool not in installed():
        raise UserError(f"harness {harness.name!r} is not installed", fix=f"forge harness install {harness.tool}")
    if harness.uses_model and check_model:
        await check_engine(config.proxy)
    await runtime.check(tasks)


@contextlib.asynccontextmanager
async def _no_proxy() -> AsyncIterator[ProxyHandle | None]:
    yield None


def summarize(results: list[RolloutResult]) -> dict[str, Any]:
    """Counts per status; reward and pass rate over the final try of each (task, attempt)."""
    final = final_tries(results)
    counts = Counter(r.status for r in final)
    scored = [r.reward for r in final if r.reward is not None and r.status != "infra_error"]
    per_task: dict[str, dict[str, Any]] = {}
    for result in sorted(final, key=lambda r: (r.task, r.attempt)):
        entry = per_task.setdefault(result.task, {"attempts": 0, "successes": 0, "statuses": Counter()})
        entry["attempts"] += 1
        entry["successes"] += result.status == "success"
        entry["statuses"][result.status] += 1
    return {"rollouts": len(results), "retries": sum(r.try_index > 0 for r in results),
            "statuses": {s: counts.get(s, 0) for s in STATUSES},
            "mean_reward": sum(scored) / len(scored) if scored else None,
            "tasks": {t: {**e, "statuses": dict(e["statuses"])} for t, e in per_task.items()}}
