"""``forge rollout``: a whole run — tasks, runtime, proxy, orchestrator, progress, summary, run dir.

Invariant: the run directory holds everything needed to understand the run afterwards: the
resolved config, one line per rollout in rollouts.jsonl (written as each ends), the trajectories,
the harness and verifier logs, and summary.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from openforgerl.config import save_resolved
from openforgerl.manifest import published_tasks
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.harnesses import make_harness
from openforgerl.rollout.orchestrator import STATUSES, Orchestrator, RolloutConfig, RolloutResult
from openforgerl.rollout.proxy_handle import open_proxy
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


def image_resolver(config: RolloutConfig):
    """Task image (+ harness layer) per rollout; docker builds run in threads, once per content."""
    if config.runtime.type != "docker":
        async def passthrough(task: Task, harness: Harness) -> str:
            return task.config.environment.docker_image or "local"
        return passthrough

    from openforgerl.containers.client import docker_client
    from openforgerl.containers.images import ensure_task_image
    from openforgerl.rollout.harness_image import harness_image

    client = docker_client()

    async def resolve(task: Task, harness: Harness) -> str:
        image, _ = await asyncio.to_thread(ensure_task_image, client, task)
        return await asyncio.to_thread(harness_image, client, image, harness.tool)
    return resolve


async def run_rollouts(config: RolloutConfig, on_result: Any = None,
                       harness: Harness | None = None) -> tuple[Path, list[RolloutResult]]:
    """Run ``config``; ``harness`` replaces the one named in the config (custom adapters, tests)."""
    tasks = load_tasks(config.tasks)
    harness = harness or make_harness(config.harness, **config.harness_options)
    run_dir, run_id = new_run_dir(config)
    save_resolved(config, run_dir)
    runtime = make_runtime(config.runtime)
    await runtime.sweep()
    resolve = image_resolver(config)
    proxied = open_proxy(config.proxy, config.model, run_dir / "proxy") if harness.uses_model else _no_proxy()
    async with proxied as proxy:
        orchestrator = Orchestrator(config, runtime, harness, proxy, run_dir, run_id, resolve, on_result)
        results = await orchestrator.run(tasks)
    (run_dir / "summary.json").write_text(json.dumps(summarize(results), indent=2))
    return run_dir, results


@contextlib.asynccontextmanager
async def _no_proxy() -> AsyncIterator[None]:
    yield None


def summarize(results: list[RolloutResult]) -> dict[str, Any]:
    """Counts per status; reward and pass rate over the final try of each (task, attempt)."""
    final: dict[tuple[str, int], RolloutResult] = {}
    for result in results:
        key = (result.task, result.attempt)
        if key not in final or result.try_index >= final[key].try_index:
            final[key] = result
    counts = Counter(r.status for r in final.values())
    scored = [r.reward for r in final.values() if r.reward is not None and r.status != "infra_error"]
    per_task: dict[str, dict[str, Any]] = {}
    for (task, _), result in sorted(final.items()):
        entry = per_task.setdefault(task, {"attempts": 0, "successes": 0, "statuses": Counter()})
        entry["attempts"] += 1
        entry["successes"] += result.status == "success"
        entry["statuses"][result.status] += 1
    return {"rollouts": len(results), "retries": sum(r.try_index > 0 for r in results),
            "statuses": {s: counts.get(s, 0) for s in STATUSES},
            "mean_reward": sum(scored) / len(scored) if scored else None,
            "tasks": {t: {**e, "statuses": dict(e["statuses"])} for t, e in per_task.items()}}
