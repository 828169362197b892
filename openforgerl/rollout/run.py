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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from openforgerl.config import save_resolved
from openforgerl.errors import UserError, map_os_errors
from openforgerl.log import get_logger
from openforgerl.manifest import published_tasks
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.harnesses import make_harness
from openforgerl.rollout.harnesses.install import installed
from openforgerl.rollout.judge_relay import JudgeRelay
from openforgerl.rollout.orchestrator import (
    STATUSES,
    OnResult,
    Orchestrator,
    RolloutConfig,
    RolloutResult,
    final_tries,
    memory_room,
    network_mode,
)
from openforgerl.rollout.proxy_handle import ProxyHandle, check_engine, listen, open_proxy
from openforgerl.rollout.runtime import NetworkMode, Reach, Runtime, is_ip, is_loopback
from openforgerl.rollout.runtimes import make_runtime
from openforgerl.tasks import Task, find_task_dirs

log = get_logger(__name__)


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
    try:
        with map_os_errors(f"creating the run directory {run_dir}"):
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / ".forge-writable"  # a read-only dir is found now, not at the first rollout's line
            probe.write_text("")
            probe.unlink()
    except (FileNotFoundError, NotADirectoryError, FileExistsError) as exc:
        raise UserError(f"cannot create the run directory {run_dir}: {exc.strerror}",
                        fix="pass --run-dir a path whose parent is a directory you can write") from exc
    return run_dir, run_dir.name


@dataclass
class PreparedRun:
    """A run whose tasks, harness and runtime are loaded and checked: nothing has started yet."""

    config: RolloutConfig
    tasks: list[Task]
    harness: Harness
    runtime: Runtime
    proxy: ProxyHandle | None = None
    reach: dict[NetworkMode, Reach] = field(default_factory=dict)
    """How sandboxes of each network mode the tasks use reach this host (networks made ready)."""

    @property
    def rollouts(self) -> int:
        """Rollouts the run makes before any infra retry."""
        return len(self.tasks) * self.config.attempts

    async def execute(self, on_result: OnResult | None = None) -> tuple[Path, list[RolloutResult]]:
        run_dir, run_id = new_run_dir(self.config)
        save_resolved(self.config, run_dir)
        await self.runtime.sweep()
        self.runtime.size(self.config.concurrency)
        hosts = sorted({r.address for r in self.reach.values() if r.address and not is_loopback(r.address)})
        async with _proxy_for(self.config, self.harness, run_dir, self.proxy, hosts) as handle, \
                _judge_for(self.config, self.tasks, self.reach) as (judge, judge_urls):
            with contextlib.ExitStack() as opened:
                urls = _model_urls(self.reach, handle, opened)
                _expose(self.reach, judge_urls, opened)
                orchestrator = Orchestrator(self.config, self.runtime, self.harness, handle, run_dir, run_id,
                                            on_result, model_urls=urls, judge=judge, judge_urls=judge_urls)
                try:
                    results = await orchestrator.run(self.tasks)
                finally:  # an interrupted run still says what it did
                    self._summarize(run_dir, orchestrator.results)
                    await asyncio.shield(self.runtime.release())
        return run_dir, results

    def _summarize(self, run_dir: Path, results: list[RolloutResult]) -> None:
        summary = summarize(results)
        done = {(r.task, r.attempt) for r in results}
        summary["not_started"] = self.rollouts - len(done)
        summary["warnings"] = self.warnings()
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))

    def warnings(self) -> list[str]:
        found = []
        if "host" in self.reach:
            found.append("network=host: sandboxes share this host's network and can reach every service on it (the "
                         "registry, vLLM, the proxy's admin API): unsafe for training")
        short = [t.name for t in self.tasks if memory_room(self.harness, t) is False]
        if short:
            found.append(f"{len(short)} task(s) ({', '.join(short[:3])}) set [environment] memory_mb under the "
                         f"{self.harness.memory_mb} MB the {self.harness.name} harness needs: a rollout whose harness "
                         "is OOM-killed there is an infra error, discarded; raise memory_mb in their task.toml")
        return found


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
    reach = await runtime.reach({network_mode(config, task) for task in tasks})
    _check_reach(config, harness, reach, given_proxy=proxy is not None)
    judged = [task.name for task in tasks if task.config.verifier.judge]
    remote = sorted({way.address for way in reach.values() if way.address and _named(way.address)})
    if judged and remote:
        raise UserError(f"the verifiers of {', '.join(judged[:3])} ask for the run's LLM judge, whose relay cannot "
                        f"listen where the {runtime.name} runtime's sandboxes reach this run ({remote[0]})",
                        fix="run judged tasks on the docker runtime")
    prepared = PreparedRun(config, tasks, harness, runtime, proxy, reach)
    for warning in prepared.warnings():
        log.warning(warning)
    return prepared


async def run_rollouts(config: RolloutConfig, on_result: OnResult | None = None, harness: Harness | None = None,
                       runtime: Runtime | None = None,
                       proxy: ProxyHandle | None = None) -> tuple[Path, list[RolloutResult]]:
    """``prepare_run`` then ``execute``: the whole of ``forge rollout`` without its display."""
    prepared = await prepare_run(config, harness, runtime, proxy)
    return await prepared.execute(on_result)


def _proxy_for(config: RolloutConfig, harness: Harness, run_dir: Path, given: ProxyHandle | None,
               sandbox_hosts: list[str]) -> contextlib.AbstractAsyncContextManager[ProxyHandle | None]:
    """The caller's proxy, else the one ``config.proxy`` names (started in-run, its model API also on
    ``sandbox_hosts``), or none for a harness that calls no model."""
    if not harness.uses_model:
        return _no_proxy()
    if given is not None:
        return contextlib.nullcontext(given)
    return open_proxy(config.proxy, config.model, run_dir / "proxy", sandbox_hosts)


JudgeReach = tuple[JudgeRelay | None, dict[NetworkMode, str]]


@contextlib.asynccontextmanager
async def _judge_for(config: RolloutConfig, tasks: list[Task],
                     reach: dict[NetworkMode, Reach]) -> AsyncIterator[JudgeReach]:
    """The judge relay, listening where each network mode's sandboxes reach this host, when a task's
    verifier asks for the run's judge ([verifier] judge = true); else nothing."""
    if not any(task.config.verifier.judge for task in tasks):
        yield None, {}
        return
    relay = JudgeRelay(config.judge)
    listeners, urls, by_address = [], {}, {}
    try:
        for mode, way in reach.items():
            if way.address is None:
                continue
            if way.address not in by_address:
                listeners.append(await listen(relay, way.address, 0))
                by_address[way.address] = f"http://{way.address}:{listeners[-1][2]}"
            urls[mode] = by_address[way.address]
        yield relay, urls
    finally:
        for server, serving, _ in listeners:
            server.should_exit = True
            await serving
        await relay.aclose()


def _expose(reach: dict[NetworkMode, Reach], urls: dict[NetworkMode, str], opened: contextlib.ExitStack) -> None:
    for mode, url in urls.items():
        address, port = urlsplit(url).hostname, urlsplit(url).port
        if address and port is not None and not is_loopback(address):
            opened.enter_context(reach[mode].expose(port))


def _named(address: str) -> bool:
    return not is_ip(address)


def _model_urls(reach: dict[NetworkMode, Reach], handle: ProxyHandle | None,
                opened: contextlib.ExitStack) -> dict[NetworkMode, str]:
    """The proxy's model API per network mode, each port opened to its sandboxes for as long as ``opened``."""
    urls: dict[NetworkMode, str] = {}
    for mode, way in reach.items():
        if handle is None or way.address is None:
            continue
        urls[mode] = handle.url_for(way.address)
        for url in handle.urls_for(way.address):  # every proxy shard's listener
            port = urlsplit(url).port
            if not is_loopback(way.address) and port is not None:
                opened.enter_context(way.expose(port))
    return urls


def _check_reach(config: RolloutConfig, harness: Harness, reach: dict[NetworkMode, Reach], *,
                 given_proxy: bool) -> None:
    if not harness.uses_model:
        return
    for mode, way in reach.items():
        if way.address is None:
            raise UserError(f"network {mode} leaves the {harness.name} harness no way to reach the model",
                            fix="use network isolated (the default) for tasks whose agent calls a model")
        if _named(way.address) and not config.proxy.url and not given_proxy:
            raise UserError(f"{mode} sandboxes reach the model at {way.address}, which a proxy started inside this "
                            "run cannot listen on",
                            fix="deploy the proxy where they reach it (forge k8s proxy | kubectl apply -f -) and set "
                                "proxy.url, proxy.sandbox_url and FORGE_PROXY_ADMIN_TOKEN (docs/kubernetes.md)")
        if config.proxy.url and not given_proxy and not is_loopback(way.address) and not config.proxy.sandbox_url:
            raise UserError(f"proxy.url is set, and {mode} sandboxes cannot reach {config.proxy.url}",
                            fix="start it with forge proxy --sandbox and set proxy.sandbox_url to the URL it "
                                "prints, or run with network=host (unsafe)")


async def preflight(config: RolloutConfig, tasks: list[Task], harness: Harness, runtime: Runtime, *,
                    check_model: bool = True) -> None:
    """Raise one ForgeError (what, and the fix) for anything that would fail every rollout of this run:
    no tasks, the harness not installed, the model engine not answering, images the runtime cannot have."""
    if not tasks:
        raise UserError(f"no task directories in {', '.join(config.tasks)}",
                        fix="pass task directories (each holds a task.toml) or a build-env manifest.jsonl")
    if harness.tool is not None and harness.tool not in installed():
        raise UserError(f"harness {harness.name!r} is not installed", fix=f"forge harness install {harness.tool}")
    judged = [task.name for task in tasks if task.config.verifier.judge]
    if judged and not config.judge.base_url:
        names = ", ".join(judged[:3])
        raise UserError(f"the verifiers of {len(judged)} task(s) ask for the run's LLM judge ({names}), and the "
                        "run has none", fix="set judge.base_url (and judge.model) to an OpenAI-compatible endpoint, "
                                            "e.g. -o judge.base_url=http://127.0.0.1:8001/v1")
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
            "truncated": sum(bool(r.truncated) for r in final),
            "tasks": {t: {**e, "statuses": dict(e["statuses"])} for t, e in per_task.items()}}
