"""Shared by the orchestrator's unit tests: agents answered by the fake runtime, and a checked run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.orchestrator import STATUSES, RolloutConfig, RolloutResult
from openforgerl.rollout.proxy_handle import ProxyHandle
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.runtime import FakeRuntime
from openforgerl.testing.tasks import write_task


class Agent(Harness):
    """The agent under test is whatever the fake sandbox's scenario says its command does."""

    name = "agent"
    uses_model = False

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["agent", ctx.instruction], env={"OPENAI_BASE_URL": ctx.base_url,
                                                          "OPENAI_API_KEY": ctx.api_key})


class ModelAgent(Agent):
    """An agent whose command makes real model calls to the in-process proxy with its rollout token."""

    uses_model = True


def run(tmp_path: Path, runtime: FakeRuntime, *, tasks: list[str] = ("hello",), harness: Harness | None = None,
        proxy: ProxyHandle | None = None, task: dict[str, Any] | None = None,
        **config: Any) -> tuple[Path, list[RolloutResult]]:
    """``forge rollout`` of ``tasks`` (hello-file tasks; ``task`` adds write_task options) on ``runtime``;
    checks what every run must hold: one line per rollout, a summary that agrees, no sandbox left."""
    dirs = [write_task(tmp_path / "tasks", name, **(task or {})) for name in tasks]
    cfg = RolloutConfig(tasks=[str(d) for d in dirs], harness="nop", run_dir=str(tmp_path / "run"), **config)
    run_dir, results = asyncio.run(run_rollouts(cfg, harness=harness or Agent(), runtime=runtime, proxy=proxy))
    lines = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [line["rollout_id"] for line in lines] == [r.rollout_id for r in results]
    assert len(lines) == summary["rollouts"] and all(line["status"] in STATUSES for line in lines)
    assert sum(summary["statuses"].values()) == len({(r.task, r.attempt) for r in results})
    assert runtime.left_running == [], "a sandbox was left behind"
    return run_dir, results


def statuses(results: list[RolloutResult]) -> list[tuple[str, float | None]]:
    return [(r.status, r.reward) for r in results]
