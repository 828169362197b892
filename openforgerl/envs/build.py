"""``forge build-env``: task directories -> checked, built, validated, repaired, published environments.

Per task, each round: load -> render the template (if any) -> static checks -> build (docker SDK,
one build per distinct environment content, layers reused) -> test dependencies in the image ->
end-to-end (nop <= nop_max, oracle >= oracle_min, N repeats, flaky = fail). A failed round goes to
the LLM repairer (when one is configured) whose edits are applied before the next round, up to K
repair rounds. A task that passes is pushed, pinned by digest and appended to manifest.jsonl.

Invariant: every task ends in exactly one ``TaskOutcome`` (passed, or failed with the stage and a
reason), recorded in task.toml and in ``build_report.json``, whatever happens to the other tasks:
one bad task never stops the batch.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from openforgerl.config import save_resolved
from openforgerl.containers.client import docker_client
from openforgerl.containers.images import ensure_task_image
from openforgerl.containers.refs import ensure_local
from openforgerl.envs import publish
from openforgerl.envs.baselines import run_baselines
from openforgerl.envs.checks import Finding, check_dependencies, static_checks
from openforgerl.envs.render import render_environment
from openforgerl.envs.repair import Repairer, RepairSettings, apply_edits, task_files
from openforgerl.errors import EnvBuildError, ForgeError
from openforgerl.log import get_logger
from openforgerl.manifest import append_manifest
from openforgerl.stack.registry import registry_address
from openforgerl.tasks import Task, find_task_dirs

log = get_logger(__name__)
Stage = Literal["load", "render", "static", "build", "dependencies", "baselines", "passed", "publish", "record"]
"""Where a task's round stopped (``passed`` when it did not); publish and record fail after a pass."""


@dataclass(frozen=True)
class BuildEvent:
    """What one task is doing now, for a display: working on ``stage`` in ``round``, or ``done``."""

    task: str
    stage: Stage | Literal["repair"]
    round: int = 0
    done: bool = False
    passed: bool = False

    def __str__(self) -> str:
        if self.done:
            return "passed" if self.passed else f"failed ({self.stage})"
        if self.stage == "publish":
            return "pushing"
        what = {"build": "building", "baselines": "nop/oracle", "repair": "repairing"}
        return f"{what.get(self.stage, self.stage)} (round {self.round})"


Progress = Callable[[BuildEvent], None]


class BuildEnvConfig(BaseModel):
    """One ``forge build-env`` run."""

    tasks: list[str] = Field(default_factory=list)
    """Task directories (or directories of task directories)."""
    push: bool = True
    """Push passing images and pin them by digest; off: validate and record only."""
    registry: str | None = None
    """host:port to push to; default the local registry (127.0.0.1:5000)."""
    repair: RepairSettings | None = None
    """The LLM repairer's endpoint; none: a failed task stays failed."""
    rounds: int = Field(2, ge=0)
    """Repair rounds after the first try (K)."""
    repeats: int = Field(2, ge=1)
    """Runs of nop and of oracle each (N); any disagreement between them fails the task as flaky."""
    nop_max: float = 0.0
    oracle_min: float = 1.0
    concurrency: int = Field(2, ge=1)
    """Tasks validated at once."""
    warn_only: list[Literal["instruction", "visibility", "hardcoded", "dependencies"]] = Field(default_factory=list)
    """Checks whose findings are recorded as warnings instead of failing the task (e.g. instruction,
    for imported tasks whose instruction points at docs rather than naming every checked file)."""
    agent_user: str | None = None
    """Run solve.sh (and nop) as this user; unset: as each task's agent runs (its [agent] user, else
    the image's unprivileged ``agent`` for our tasks and root for Harbor's)."""
    network: Literal["isolated", "bridge", "host", "none"] = "isolated"
    """The sandboxes' network for tasks that declare none (see forge rollout's ``network``)."""
    manifest: str | None = None
    """Where published tasks are appended; default manifest.jsonl beside the first TASKS path's tasks."""
    out_dir: str | None = None
    """Report and rollout logs (default runs/<time>-build-env)."""


@dataclass
class RoundRecord:
    """One try of a task (round 0 is the first; later ones follow a repair)."""

    round: int
    stage: Stage
    """Where it stopped (``passed`` when it did not)."""
    passed: bool
    reason: str = ""
    findings: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Findings of the checks in ``warn_only``: recorded, not failing."""
    image: str | None = None
    built: bool = False
    """Whether this round ran a docker build (false: an identical environment was already built)."""
    nop_rewards: list[float | None] = field(default_factory=list)
    oracle_rewards: list[float | None] = field(default_factory=list)
    failure_rewards: dict[str, list[float | None]] = field(default_factory=dict)
    seconds: float = 0.0
    repair: dict[str, Any] | None = None
    """The repair applied after this round: explanation and paths edited, or the repairer's error."""


@dataclass
class TaskOutcome:
    task: str
    path: str
    passed: bool
    stage: Stage
    reason: str
    image: str | None = None
    image_digest: str | None = None
    rounds: list[RoundRecord] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def builds(self) -> int:
        return sum(r.built for r in self.rounds)


@dataclass
class _Attempt:
    record: RoundRecord
    logs: dict[str, str] = field(default_factory=dict)


class EnvBuilder:
    """Builds a batch; ``progress(task, text)`` is told what each task is doing."""

    def __init__(self, config: BuildEnvConfig, out_dir: Path, progress: Progress | None = None) -> None:
        self.config, self.out_dir = config, out_dir
        self.progress: Progress = progress or (lambda event: None)
        self.client = docker_client()
        self.registry = config.registry or registry_address()
        self.repairer = Repairer(config.repair) if config.repair else None
        self._labels: dict[Path, str] = {}

    async def run(self, task_dirs: list[Path]) -> list[TaskOutcome]:
        gate = asyncio.Semaphore(self.config.concurrency)
        for task_dir in task_dirs:  # runs/<label>: the directory name, numbered when two share one
            label, n = task_dir.name, 1
            while label in self._labels.values():
                n, label = n + 1, f"{task_dir.name}-{n + 1}"
            self._labels[task_dir] = label

        async def one(task_dir: Path) -> TaskOutcome:
            async with gate:
                return await self.build_task(task_dir)
        return list(await asyncio.gather(*(one(d) for d in task_dirs)))

    async def build_task(self, task_dir: Path) -> TaskOutcome:
        """Never raises: whatever goes wrong becomes this task's failed outcome."""
        started = time.monotonic()
        rounds: list[RoundRecord] = []
        outcome = TaskOutcome(task_dir.name, str(task_dir), False, "load", "")
        try:
            await self._rounds(task_dir, outcome, rounds)
            if outcome.passed and self.config.push:
                await self._push(outcome)
        except Exception as exc:  # a bug of ours must not stop the batch
            log.error("build-env %s crashed:\n%s", task_dir, traceback.format_exc())
            outcome.passed, outcome.reason = False, f"internal error: {type(exc).__name__}: {exc}"
        outcome.rounds, outcome.seconds = rounds, round(time.monotonic() - started, 2)
        self._record(task_dir, outcome)
        self.progress(BuildEvent(outcome.task, outcome.stage, len(rounds) - 1, done=True, passed=outcome.passed))
        return outcome

    async def _push(self, outcome: TaskOutcome) -> None:
        assert outcome.image is not None  # only a passed task is pushed, and no round passes without its image
        self.progress(BuildEvent(outcome.task, "publish"))
        try:
            outcome.image, outcome.image_digest = await asyncio.to_thread(
                publish.push_image, self.client, outcome.image, self.registry)
        except ForgeError as exc:
            outcome.passed, outcome.stage, outcome.reason = False, "publish", str(exc)

    async def _rounds(self, task_dir: Path, outcome: TaskOutcome, rounds: list[RoundRecord]) -> None:
        for number in range(self.config.rounds + 1):
            attempt = await self._attempt(task_dir, number, outcome)
            rounds.append(attempt.record)
            outcome.passed, outcome.stage, outcome.reason = (attempt.record.passed, attempt.record.stage,
                                                             attempt.record.reason)
            outcome.image = attempt.record.image
            if attempt.record.passed or self.repairer is None or number == self.config.rounds:
                return
            if attempt.record.stage == "load":
                return  # without a loadable task.toml there is nothing to show the repairer
            self.progress(BuildEvent(outcome.task, "repair", number + 1))
            attempt.record.repair = await self._repair(task_dir, number + 1, attempt, rounds)

    async def _attempt(self, task_dir: Path, number: int, outcome: TaskOutcome) -> _Attempt:
        started = time.monotonic()
        record = RoundRecord(number, "load", False)
        attempt = _Attempt(record)
        try:
            await self._steps(task_dir, number, outcome, attempt)
        except ForgeError as exc:
            record.reason = str(exc)
        record.seconds = round(time.monotonic() - started, 2)
        return attempt

    async def _steps(self, task_dir: Path, number: int, outcome: TaskOutcome, attempt: _Attempt) -> None:
        record = attempt.record
        record.stage = "render"
        render_environment(task_dir)
        record.stage = "load"
        task = Task.load(task_dir)
        outcome.task = task.name
        publish.clear_own_pin(task)
        record.stage = "static"
        if not self._fail_on(record, static_checks(task)):
            return
        record.stage = "build"
        self.progress(BuildEvent(task.name, "build", number))
        record.image, record.built = await self._image(task)
        record.stage = "dependencies"
        if not self._fail_on(record, await asyncio.to_thread(check_dependencies, self.client, record.image, task)):
            return
        record.stage = "baselines"
        self.progress(BuildEvent(task.name, "baselines", number))
        label = self._labels.get(task_dir, task_dir.name)
        checks = await run_baselines(task_dir, self.out_dir / "runs" / label / f"round-{number}",
                                  repeats=self.config.repeats, nop_max=self.config.nop_max,
                                  oracle_min=self.config.oracle_min, agent_user=self.config.agent_user,
                                  network=self.config.network)
        record.nop_rewards, record.oracle_rewards = checks.nop.rewards, checks.oracle.rewards
        record.failure_rewards = {name: check.rewards for name, check in checks.failures.items()}
        attempt.logs = {f"{check.harness} {k}": v for check in (checks.nop, checks.oracle, *checks.failures.values())
                        for k, v in check.logs.items()}
        record.passed, record.reason = checks.ok, checks.reason
        record.stage = "passed" if checks.ok else record.stage

    def _fail_on(self, record: RoundRecord, findings: list[Finding]) -> bool:
        """True to go on; False (and the reason recorded) when a finding is not a warning."""
        record.warnings += [str(f) for f in findings if f.check in self.config.warn_only]
        failing = [str(f) for f in findings if f.check not in self.config.warn_only]
        if failing:
            record.findings = failing
            record.reason = f"{record.stage} check failed: " + "; ".join(failing)
        return not failing

    async def _image(self, task: Task) -> tuple[str, bool]:
        """The task's image and whether this round built it (one build per content hash at a time)."""
        pinned = task.config.environment.docker_image
        if pinned:  # a task's own prebuilt image: local, or from a loopback registry, never a public one
            await asyncio.to_thread(ensure_local, self.client, pinned, EnvBuildError,
                                    fix="load it (docker load) or push it to the local registry, or remove "
                                        "docker_image so environment/Dockerfile is built")
            return pinned, False
        return await asyncio.to_thread(ensure_task_image, self.client, task)

    async def _repair(self, task_dir: Path, number: int, attempt: _Attempt, rounds: list[RoundRecord]) -> dict:
        assert self.repairer is not None
        task = Task.load(task_dir)
        history = [{"round": r.round, "explanation": r.repair.get("explanation", r.repair.get("error", "")),
                    "paths": r.repair.get("paths", []), "outcome": "still failing"} for r in rounds if r.repair]
        context = {"task_name": task.name, "round": number, "rounds": self.config.rounds,
                   "reason": attempt.record.reason, "findings": attempt.record.findings, "files": task_files(task),
                   "logs": attempt.logs, "history": history}
        try:
            proposal = await asyncio.to_thread(self.repairer.propose, context)
        except ForgeError as exc:
            return {"error": str(exc)}
        paths = apply_edits(task_dir, proposal)
        return {"explanation": proposal.explanation, "paths": paths}

    def _record(self, task_dir: Path, outcome: TaskOutcome) -> None:
        if not (task_dir / "task.toml").is_file() or outcome.stage == "load":
            return
        last = outcome.rounds[-1] if outcome.rounds else RoundRecord(0, outcome.stage, False)
        values = {"passed": outcome.passed, "reason": outcome.reason or None, "date": _now(),
                  "nop_rewards": [r for r in last.nop_rewards if r is not None],
                  "oracle_rewards": [r for r in last.oracle_rewards if r is not None],
                  "failure_rewards": {name: [r for r in rewards if r is not None]
                                      for name, rewards in last.failure_rewards.items()} or None,
                  "image": outcome.image, "image_digest": outcome.image_digest, "rounds": len(outcome.rounds) - 1,
                  "warnings": last.warnings or None}
        try:
            publish.record_validation(task_dir, values, outcome.image_digest)
        except ForgeError as exc:
            outcome.passed, outcome.stage, outcome.reason = False, "record", str(exc)
            return
        if outcome.passed and outcome.image_digest:
            append_manifest(self.manifest_path(), {
                "task": outcome.task, "path": str(task_dir.resolve()), "image": outcome.image_digest,
                "validation": {k: v for k, v in values.items() if k not in ("image", "image_digest") and v is not None},
                "date": values["date"]})

    def manifest_path(self) -> Path:
        if self.config.manifest:
            return Path(self.config.manifest)
        first = Path(self.config.tasks[0])
        return (first.parent if (first / "task.toml").is_file() else first) / "manifest.jsonl"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class BuildReport:
    out_dir: Path
    outcomes: list[TaskOutcome]
    manifest: Path
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        passed = sum(o.passed for o in self.outcomes)
        return {"tasks": len(self.outcomes), "passed": passed, "failed": len(self.outcomes) - passed,
                "builds": sum(o.builds for o in self.outcomes), "seconds": round(self.seconds, 2),
                "manifest": str(self.manifest), "outcomes": [asdict(o) for o in self.outcomes]}


async def build_envs(config: BuildEnvConfig, progress: Progress | None = None) -> BuildReport:
    """Run a whole batch; the report is also written to ``out_dir/build_report.json``."""
    started = time.monotonic()
    out_dir = Path(config.out_dir or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-build-env"))
    save_resolved(config, out_dir)
    builder = EnvBuilder(config, out_dir, progress)
    outcomes = await builder.run(find_task_dirs(list(config.tasks)))
    report = BuildReport(out_dir, outcomes, builder.manifest_path(), time.monotonic() - started)
    (out_dir / "build_report.json").write_text(json.dumps(report.to_dict(), indent=2, default=str))
    return report
