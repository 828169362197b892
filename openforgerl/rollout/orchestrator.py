"""The rollout orchestrator: (task, attempt) pairs -> sandboxed harness runs -> verified, recorded results.

Per rollout: create the proxy rollout -> start the sandbox (task image + harness layer) -> run the
harness on the instruction (agent timeout) -> kill what it left running -> run the verifier from a
fresh /logs/verifier (verifier timeout) -> finish the proxy rollout with reward and status -> save
the trajectory -> remove the sandbox.

Invariant: every rollout ends in exactly one recorded status, written to ``rollouts.jsonl`` as
soon as it is known — ``success`` / ``failure`` (the policy's), ``agent_timeout``,
``infra_error`` (engine down, image missing, sandbox died, the harness or the sandbox's init OOM-killed in less
memory than the harness declares it needs, anything not the policy's fault: discarded for training, optionally
retried as a new rollout),
``verifier_error``, or ``cancelled`` (the run was interrupted while it ran: discarded for training like infra
errors). A command of the agent's that the kernel OOM-kills while the harness goes on is the policy's doing: the
rollout is verified as usual. So is a harness OOM-killed in a sandbox with room for it (the agent's work took the
memory, or raised the harness's ``oom_score_adj`` so the kernel picked it); an init OOM-killed there, or ended from
inside, is a failure with reward 0. So is a
verifier ended by a signal or a sandbox whose init is ended from inside while the verifier runs the agent's work
(reward 0), and a verifier that times out on the agent's work but not on a fresh sandbox of the same image: a
``verifier_error`` is discarded, so one the agent can cause would be a way out of every failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, SerializeAsAny, field_validator, model_validator

from openforgerl.errors import ForgeError, SandboxError
from openforgerl.log import get_logger
from openforgerl.rollout.harness import AgentContext, Harness
from openforgerl.rollout.harnesses import HARNESSES, validate_harness_options
from openforgerl.rollout.integrity import guarded_roots, tampered
from openforgerl.rollout.judge_relay import JudgeRelay, JudgeSettings
from openforgerl.rollout.proxy_handle import ProxyHandle, ProxySettings
from openforgerl.rollout.runtime import (
    LABEL_ATTEMPT,
    LABEL_ROLLOUT,
    LABEL_RUN,
    LABEL_TASK,
    NETWORK_MODES,
    ExecResult,
    NetworkMode,
    Runtime,
    RuntimeConfig,
    Sandbox,
    SandboxHealth,
    SandboxSpec,
)
from openforgerl.rollout.runtimes import runtime_config
from openforgerl.rollout.runtimes.docker import DockerRuntimeConfig
from openforgerl.rollout.transcript import to_jsonl, transcript_events
from openforgerl.rollout.verify import run_verifier, signal_of
from openforgerl.tasks import Task

log = get_logger(__name__)
Status = Literal["success", "failure", "agent_timeout", "infra_error", "verifier_error", "cancelled"]
STATUSES: tuple[Status, ...] = get_args(Status)
MIB = 1024 * 1024
SANDBOX_SETUP_SEC = 300.0
"""Beyond the agent and verifier budgets, what a sandbox's deadline allows for its start, the harness's
setup, the seal and the copies out."""
CONTROL_HEADROOM = 0.5
"""A verifier that timed out on the agent's work is blamed on that work only when, on the task's untouched image,
it ends within this share of its timeout (a verifier near its limit anyway, or a loaded machine, is not the
policy's doing)."""
TRANSCRIPT = "transcript.jsonl"
"""In /logs/verifier, for tasks whose [verifier] transcript is set."""


class RolloutConfig(BaseModel):
    """One ``forge rollout`` run."""

    tasks: list[str] = Field(default_factory=list)
    """Task directories (or directories of task directories)."""
    harness: str = "react"
    harness_options: dict[str, Any] = Field(default_factory=dict)
    """Passed to the harness adapter (e.g. tool_choice: required for small models)."""
    model: str = "smollm2"
    """The policy: the proxy's served name and tokenizer."""
    attempts: int = Field(1, ge=1)
    """Rollouts per task (a group, kept together for GRPO and pass@k)."""
    concurrency: int = Field(4, ge=1)
    runtime: SerializeAsAny[RuntimeConfig] = Field(default_factory=DockerRuntimeConfig)
    """Where rollouts run: ``type`` names a runtime (docker, local, or a plugin's); the other keys are
    that runtime's settings."""
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    """The LLM judge that verifiers of tasks with ``[verifier] judge = true`` reach through the run's
    judge relay (see rollout/judge_relay.py)."""
    run_dir: str | None = None
    """Where results go (default runs/<time>-<harness>)."""
    agent_timeout_sec: float | None = Field(None, gt=0)
    """Overrides every task's [agent] timeout_sec."""
    verifier_timeout_sec: float | None = Field(None, gt=0)
    """Overrides every task's [verifier] timeout_sec."""
    pass_threshold: float = 1.0
    """A reward at or above this is a success."""
    retry_infra: int = Field(0, ge=0)
    """Retry an infra_error this many times, each as a new rollout."""
    network: NetworkMode = "isolated"
    """Sandbox network for tasks that declare none: isolated (no route out; only the proxy's model API
    of this host is reachable), bridge (a route out), none. ``host`` gives every sandbox this host's
    network, whatever its task declares: unsafe for training, and said so in the run's warnings."""
    agent_user: str | None = None
    """Run every agent as this user (a name or uid[:gid]); unset: each task's [agent] user."""
    storage_poll_sec: float = Field(1.0, gt=0)
    logs_max_mb: int = Field(64, gt=0)
    """At most this much of a sandbox's /logs is copied into the run dir (the rest is listed as left out)."""
    """How often the size of a sandbox's writable layer is checked against its task's storage_mb."""
    workdir: str = "/app"
    """Where the agent works and the verifier runs."""

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime_settings(cls, value: Any) -> RuntimeConfig:
        return runtime_config(value)

    @model_validator(mode="after")
    def _harness_settings(self) -> RolloutConfig:
        # ConfigError is not a ValueError: it leaves pydantic as the one line it is. A name no table knows
        # is left to the run, which may be given that harness (run_rollouts(harness=...)) or refuses it.
        if self.harness in HARNESSES:
            validate_harness_options(self.harness, self.harness_options)
        return self


@dataclass
class RolloutResult:
    """One line of rollouts.jsonl."""

    rollout_id: str
    task: str
    attempt: int
    harness: str
    status: Status
    reward: float | None
    reason: str = ""
    try_index: int = 0
    """0 for the first try of (task, attempt); n for its n-th infra retry."""
    timings: dict[str, float] = field(default_factory=dict)
    model_usage: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    harness_exit_code: int | None = None
    trajectory: str | None = None
    sandbox: dict[str, Any] = field(default_factory=dict)
    """What the sandbox showed beyond the reward: ``tampered`` (system paths the agent changed),
    ``storage_exceeded_mb``, ``logs`` (what the copy of /logs left out), ``integrity`` when unchecked."""
    truncated: str | None = None
    """Why the proxy cut the rollout's model calls short (its token or call budget), else None."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)


def final_tries(results: Iterable[RolloutResult]) -> list[RolloutResult]:
    """The last try of each (task, attempt): what counts once infra retries are done, in first-seen order."""
    final: dict[tuple[str, int], RolloutResult] = {}
    for result in results:
        key = (result.task, result.attempt)
        if key not in final or result.try_index >= final[key].try_index:
            final[key] = result
    return list(final.values())


@dataclass
class Job:
    task: Task
    attempt: int
    try_index: int = 0


ImageFor = Callable[[Task, Harness], Awaitable[str]]
OnResult = Callable[[RolloutResult], None]


class Orchestrator:
    """Runs jobs with bounded concurrency; ``on_result`` sees each result as soon as it is recorded."""

    def __init__(self, config: RolloutConfig, runtime: Runtime, harness: Harness, proxy: ProxyHandle | None,
                 run_dir: Path, run_id: str, on_result: OnResult | None = None,
                 model_urls: dict[NetworkMode, str] | None = None, judge: JudgeRelay | None = None,
                 judge_urls: dict[NetworkMode, str] | None = None) -> None:
        self.config, self.runtime, self.harness, self.proxy = config, runtime, harness, proxy
        self.run_dir, self.run_id = run_dir, run_id
        self.model_urls = model_urls if model_urls is not None else {
            mode: proxy.base_url for mode in NETWORK_MODES if proxy is not None}
        """The proxy's model API as sandboxes of each network mode reach it."""
        self.judge, self.judge_urls = judge, judge_urls or {}
        """The judge relay (for tasks whose verifier asks for it) and its URL per network mode."""
        self.on_result: OnResult = on_result or (lambda result: None)
        self.results: list[RolloutResult] = []
        self._out = (run_dir / "rollouts.jsonl").open("a", encoding="utf-8")

    async def run(self, tasks: list[Task]) -> list[RolloutResult]:
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for task in tasks:
            for attempt in range(self.config.attempts):
                queue.put_nowait(Job(task, attempt))
        workers = [asyncio.create_task(self._worker(queue)) for _ in range(self.config.concurrency)]
        try:
            await queue.join()
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._out.close()
        return self.results

    async def _worker(self, queue: asyncio.Queue[Job]) -> None:
        while True:
            job = await queue.get()
            try:
                result = await self.run_one(job)
                self._record(result)
                if result.status == "infra_error" and job.try_index < self.config.retry_infra:
                    queue.put_nowait(Job(job.task, job.attempt, job.try_index + 1))
            finally:
                queue.task_done()

    def _record(self, result: RolloutResult) -> None:
        self.results.append(result)
        self._out.write(result.to_json() + "\n")
        self._out.flush()
        self.on_result(result)

    async def run_one(self, job: Job) -> RolloutResult:
        """One rollout, start to finish; never raises (a crash here is recorded as infra_error).

        The result starts as an infra error and each phase that completes says what it became."""
        started = time.monotonic()
        result = RolloutResult("", job.task.name, job.attempt, self.harness.name, "infra_error", None,
                               try_index=job.try_index)
        metadata = {"task": job.task.name, "attempt": job.attempt, "harness": self.harness.name,
                    "run": self.run_id, "model": self.config.model, "try": job.try_index}
        try:
            result.rollout_id, token = await self._open(metadata)
        except ForgeError as exc:
            result.rollout_id = f"no-proxy-{job.task.name}-{job.attempt}-{job.try_index}"
            result.reason = f"proxy: {exc}"
            return _closed(result, started)
        try:
            await self._sandboxed(job, token, result)
        except asyncio.CancelledError:  # the run is being interrupted: this rollout still gets its line
            result.status, result.reason, result.reward = "cancelled", "the run was interrupted", None
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._finish(result, metadata, started))
            self._record(result)
            raise
        except ForgeError as exc:
            result.status, result.reason = "infra_error", str(exc)
        except Exception as exc:  # a bug of ours must still end the rollout with one status
            log.error("rollout %s crashed:\n%s", result.rollout_id, traceback.format_exc())
            result.status, result.reason = "infra_error", f"internal error: {type(exc).__name__}: {exc}"
        return await self._finish(result, metadata, started)

    async def _open(self, metadata: dict[str, Any]) -> tuple[str, str]:
        """The rollout's id and token: from the proxy, or made up when the harness calls no model."""
        if self.proxy is None:
            return f"r-{uuid.uuid4().hex[:16]}", ""
        return await self.proxy.create(metadata)

    async def _sandboxed(self, job: Job, token: str, result: RolloutResult) -> None:
        task, t0 = job.task, time.monotonic()
        image = await self.runtime.image_for(task, self.harness.tool)
        budget = (self.config.agent_timeout_sec or task.config.agent.timeout_sec) + \
            (self.config.verifier_timeout_sec or task.config.verifier.timeout_sec) + SANDBOX_SETUP_SEC
        spec = SandboxSpec(image=image, labels={LABEL_RUN: self.run_id, LABEL_ROLLOUT: result.rollout_id,
                                                LABEL_TASK: task.name, LABEL_ATTEMPT: str(job.attempt)},
                           cpus=task.config.environment.cpus, memory_mb=task.config.environment.memory_mb,
                           storage_mb=task.config.environment.storage_mb, network=network_mode(self.config, task),
                           workdir="/", agent_user=agent_user(self.config, task), deadline_sec=budget)
        async with self.runtime.sandbox(spec) as sandbox:
            result.timings["container_start_s"] = time.monotonic() - t0
            user = agent_user(self.config, task)
            try:
                await self._agent_phase(sandbox, job, token, result, user)
                if result.status != "infra_error" and result.reward is None:  # a sandbox still there to seal
                    try:
                        await self._seal(sandbox, task, result, user)
                    except SandboxError:  # a process the agent left behind ended the sandbox meanwhile
                        ended = await _ended(sandbox)
                        if ended is None or not self._ended_by_policy(ended, task, result):
                            raise
                        self._policy_ended(result, ended, task)
                if result.status in ("failure", "agent_timeout") and result.reward is None:
                    await self._verify_phase(sandbox, task, result, spec)
            finally:
                t1 = time.monotonic()
                await self._save_logs(sandbox, result)
                result.timings["logs_s"] = time.monotonic() - t1
                t1 = time.monotonic()
        result.timings["teardown_s"] = time.monotonic() - t1

    async def _agent_phase(self, sandbox: Sandbox, job: Job, token: str, result: RolloutResult,
                           user: str | None) -> None:
        timeout = self.config.agent_timeout_sec or job.task.config.agent.timeout_sec
        model_url = self.model_urls.get(network_mode(self.config, job.task), "")
        if self.proxy is not None and model_url:  # the listener of the proxy shard that owns this rollout
            model_url = self.proxy.model_url(model_url, result.rollout_id)
        ctx = AgentContext(instruction=job.task.instruction, base_url=model_url, api_key=token,
                           model=self.config.model, workdir=self.config.workdir, timeout_sec=timeout, user=user)
        at_rest = await sandbox.memory_in_use()  # the environment's own (its services), before the agent's
        if at_rest is not None:
            result.sandbox["memory_at_rest_mb"] = round(at_rest / 2**20, 1)
        t0 = time.monotonic()
        try:
            run = await self._watched(sandbox, job.task, result, self.harness.run(sandbox, job.task, ctx))
        except SandboxError:  # an exec into a sandbox that had just ended (a pod evicted or past its deadline)
            ended = await _ended(sandbox)
            if ended is None:
                raise
            run = ExecResult(None, "", ended.detail, time.monotonic() - t0, timed_out=True)  # classified below
        result.timings["harness_s"] = time.monotonic() - t0
        if run is None:  # stopped by the storage watchdog: the policy's doing, reward 0
            return
        result.harness_exit_code = run.exit_code
        _write(self.run_dir / "logs" / result.rollout_id / "agent.stdout", run.stdout)
        _write(self.run_dir / "logs" / result.rollout_id / "agent.stderr", run.stderr)
        health = await sandbox.health()
        if health.running and _killed(run):  # the harness SIGKILLed: by the end of the sandbox's init, Docker's
            health = await _ended(sandbox, settle_sec=1.0) or health  # state may lag the exec's end a moment
        if health.storage_exceeded:  # the runtime ended it for the agent's writes: as the storage watchdog does
            limit = job.task.config.environment.storage_mb
            result.status, result.reward = "failure", 0.0
            result.reason = f"the agent wrote past [environment] storage_mb = {limit} ({health.detail})"
            result.sandbox["storage_exceeded_mb"] = limit
        elif health.deadline:  # the sandbox's own deadline passed while the agent ran
            result.status, result.reason = "agent_timeout", f"agent ran past its sandbox's deadline ({health.detail})"
            result.reward = 0.0  # nothing is left to verify
        elif self._ended_by_policy(health, job.task, result):  # a root agent's `kill 1`: not an infra error to discard
            self._policy_ended(result, health, job.task)
        elif not health.running:
            result.status = "infra_error"
            result.reason = f"sandbox OOM-killed{self._memory_fix(job.task, result)}" if health.oom_killed \
                else health.detail
        elif health.oom_killed and _killed(run):  # the harness itself
            if memory_room(self.harness, job.task, _at_rest(result)):  # room for it: the agent's work took the rest
                result.status = "failure"  # until the verifier says otherwise, as if the harness had exited
                result.reason = f"the harness was OOM-killed ({health.detail}) in memory_mb = " \
                    f"{job.task.config.environment.memory_mb}, room for its own {self.harness.memory_mb} MB"
                result.sandbox["harness_oom_killed"] = True
            else:
                result.status = "infra_error"
                result.reason = f"harness OOM-killed ({health.detail}){self._memory_fix(job.task, result)}"
        elif run.timed_out:
            result.status, result.reason = "agent_timeout", f"agent ran past {timeout:.0f} s"
        else:
            result.status, result.reason = "failure", ""  # until the verifier says otherwise
        if health.oom_killed and result.status != "infra_error":  # a command of the agent's ran out of the task's
            result.sandbox["oom_killed"] = health.detail or True  # memory and the harness went on: the policy's
        if health.running:
            await self._check_storage(sandbox, job.task, result)

    def _ended_by_policy(self, health: SandboxHealth, task: Task, result: RolloutResult) -> bool:
        """Whether a sandbox that ended was ended by the agent: its init ended from inside, or OOM-killed in a
        memory limit with room for the harness (the agent's work took the memory, or a root agent raised the
        init's ``oom_score_adj``; the kernel picks the largest process, so an init OOM-killed otherwise is rare)."""
        if health.ended_from_inside:
            return True
        return not health.running and health.oom_killed and bool(memory_room(self.harness, task, _at_rest(result)))

    def _policy_ended(self, result: RolloutResult, health: SandboxHealth, task: Task) -> None:
        _ended_by_agent(result, health)
        if not health.ended_from_inside:  # the OOM kill of its init
            result.reason = f"the sandbox's init was OOM-killed ({health.detail}) in memory_mb = " \
                f"{task.config.environment.memory_mb}, room for the harness's {self.harness.memory_mb} MB" \
                + _beside(result)
            result.sandbox["oom_killed"] = health.detail or True

    def _memory_fix(self, task: Task, result: RolloutResult) -> str:
        need = self.harness.memory_mb
        if not need:
            return ""
        limit = task.config.environment.memory_mb
        return f": [environment] memory_mb = {limit} is under the {need} MB {self.harness.name} needs" \
            f"{_beside(result)}; raise it in {task.name}'s task.toml"

    async def _watched(self, sandbox: Sandbox, task: Task, result: RolloutResult,
                       agent: Coroutine[Any, Any, ExecResult]) -> ExecResult | None:
        """The agent's run, stopped early if its sandbox writes past the task's storage_mb."""
        if not task.config.environment.storage_mb:
            return await agent
        running = asyncio.ensure_future(agent)
        while not running.done():
            await asyncio.wait({running}, timeout=self.config.storage_poll_sec)
            if not running.done() and await self._check_storage(sandbox, task, result):
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError, ForgeError):
                    await running
                return None
        return running.result()

    async def _check_storage(self, sandbox: Sandbox, task: Task, result: RolloutResult) -> bool:
        """True (and the rollout a failure with reward 0) once the sandbox wrote past storage_mb."""
        limit = task.config.environment.storage_mb
        written = await sandbox.written_bytes() if limit else None
        if limit is None or written is None or written <= limit * MIB:
            return False
        result.status, result.reward = "failure", 0.0
        result.reason = f"the agent wrote {written / MIB:.0f} MiB, over [environment] storage_mb = {limit}"
        result.sandbox["storage_exceeded_mb"] = round(written / MIB, 1)
        return True

    async def _seal(self, sandbox: Sandbox, task: Task, result: RolloutResult, user: str | None) -> None:
        """Between agent and verifier: end everything the agent started, then check from outside what it
        changed; a change to a system path it may not touch fails the rollout (reward 0, ``tampered``)."""
        t0 = time.monotonic()
        await sandbox.end_processes(user)
        changed = await sandbox.changes(guarded_roots())
        result.timings["seal_s"] = time.monotonic() - t0
        if changed is None:
            result.sandbox["integrity"] = f"unchecked: the {self.runtime.name} runtime cannot see changes"
            return
        bad = tampered(changed, task.config.agent.writable_paths, self.config.workdir)
        if bad:
            result.status, result.reward = "failure", 0.0
            result.reason = f"tampered with {len(bad)} system path(s) the task does not declare writable: " + \
                ", ".join(bad[:5])
            result.sandbox["tampered"] = bad

    async def _verify_phase(self, sandbox: Sandbox, task: Task, result: RolloutResult, spec: SandboxSpec) -> None:
        timeout, t0 = self.config.verifier_timeout_sec or task.config.verifier.timeout_sec, time.monotonic()
        files = await self._verifier_files(task, result)
        url = self.judge_urls.get(network_mode(self.config, task))
        token = self.judge.issue() if self.judge is not None and url and task.config.verifier.judge else None
        try:  # the judge token lives exactly as long as this verifier: the agent's processes have all ended
            env = self.judge.environment(url, token) if self.judge is not None and url and token else {}
            verdict = await run_verifier(sandbox, task, timeout, self.config.workdir, files, env)
        except SandboxError:  # an exec into a sandbox that had just ended under the verifier
            ended = await _ended(sandbox)
            if ended is None:
                raise
            _died_under_verifier(result, ended)
            return
        finally:
            if self.judge is not None and token:
                self.judge.revoke(token)
        result.timings["verifier_s"] = time.monotonic() - t0  # the whole phase: tests copied in, run, reward read
        _write(self.run_dir / "logs" / result.rollout_id / "verifier.stdout", verdict.stdout)
        _write(self.run_dir / "logs" / result.rollout_id / "verifier.stderr", verdict.stderr)
        result.metrics = verdict.metrics
        if verdict.error:
            health = await sandbox.health()
            if not health.running:
                _died_under_verifier(result, health)
            elif verdict.signal is not None:  # the agent's code killed the verifier, or ran it out of memory: a
                result.reward = 0.0  # verifier error would be a way out of any failure (status: failure or timeout)
                result.reason = f"the verifier was ended by signal {verdict.signal} under the agent's work " \
                                f"({verdict.error})"
                result.sandbox["verifier_signal"] = verdict.signal
            elif verdict.timed_out:
                await self._timed_out(task, result, spec, timeout, verdict.error)
            else:
                result.status, result.reason = "verifier_error", verdict.error
            return
        result.reward = verdict.reward
        if result.status == "failure" and verdict.reward is not None:  # the agent phase ended normally
            result.status = "success" if verdict.reward >= self.config.pass_threshold else "failure"

    async def _timed_out(self, task: Task, result: RolloutResult, spec: SandboxSpec, timeout: float,
                         error: str) -> None:
        """The verifier ran past its timeout on the agent's work: the same verifier on a fresh sandbox of the same
        image (the untouched state, no agent) tells whose hang it is. One that ends there well within the timeout
        hangs on what the agent left (a replaced interpreter, a solution that loops, a process holding a lock):
        reward 0, kept, since a discarded verifier_error would be a way out of any failure. One that hangs there
        too is the verifier's own (or the machine's) and stays a verifier_error; so does a verifier that asks a
        judge, whose latency is not the policy's."""
        if task.config.verifier.judge:
            result.status, result.reason = "verifier_error", error
            return
        labels = {**spec.labels, LABEL_ROLLOUT: f"{spec.labels.get(LABEL_ROLLOUT, 'rollout')}-control"}
        control_spec = spec.model_copy(update={"labels": labels, "deadline_sec": timeout + SANDBOX_SETUP_SEC})
        t0 = time.monotonic()
        try:
            async with self.runtime.sandbox(control_spec) as control:
                verdict = await run_verifier(control, task, timeout, self.config.workdir)
        except ForgeError as exc:
            result.status, result.reason = "verifier_error", f"{error} (no control run: {exc})"
            return
        finally:
            result.timings["control_verifier_s"] = time.monotonic() - t0
        result.sandbox["verifier_timeout"] = {"seconds": timeout, "control_s": round(verdict.seconds, 3)}
        if verdict.timed_out or verdict.seconds > timeout * CONTROL_HEADROOM:
            result.status = "verifier_error"
            result.reason = f"{error}, and took {verdict.seconds:.1f} s or more on the task's untouched image too"
            return
        result.reward = 0.0  # status stays failure or agent_timeout
        result.reason = f"{error} on the agent's work; on the task's untouched image it ended in " \
                        f"{verdict.seconds:.1f} s"

    async def _verifier_files(self, task: Task, result: RolloutResult) -> dict[str, str]:
        """What the verifier gets from the host: the transcript, when the task asks for it (empty when the
        harness called no model: the instruction alone)."""
        if not task.config.verifier.transcript:
            return {}
        calls = (await self.proxy.trajectory(result.rollout_id))["calls"] if self.proxy is not None else []
        return {TRANSCRIPT: to_jsonl(transcript_events(task.instruction, calls, cwd=self.config.workdir))}

    async def _finish(self, result: RolloutResult, metadata: dict[str, Any], started: float) -> RolloutResult:
        """Close the proxy rollout with the outcome and save its trajectory (harnesses that call no model
        have neither); engine errors during the rollout make it an infra error."""
        result.timings["total_s"] = time.monotonic() - started
        if self.proxy is None:
            return _closed(result, started)
        try:
            summary = await self.proxy.finish(result.rollout_id, result.reward, result.status,
                                              {**metadata, "timings": result.timings, "reason": result.reason,
                                               "sandbox": result.sandbox})
            result.model_usage = _usage(summary)
            result.truncated = summary.get("truncated")
            errors = result.model_usage.get("engine_errors")
            if errors and result.status in ("success", "failure", "agent_timeout"):
                result.status, result.reason = "infra_error", f"engine failed on {errors:.0f} call(s)"
            trajectory = await self.proxy.trajectory(result.rollout_id)
            path = self.run_dir / "trajectories" / f"{result.rollout_id}.json"
            _write(path, json.dumps(trajectory))
            result.trajectory = str(path.relative_to(self.run_dir))
        except ForgeError as exc:
            if result.status not in ("infra_error", "cancelled"):
                result.status, result.reason = "infra_error", f"proxy: {exc}"
        return _closed(result, started)

    async def _save_logs(self, sandbox: Sandbox, result: RolloutResult) -> None:
        """The sandbox's /logs into the run dir, bounded; what was left out is recorded, never fatal."""
        try:
            copied = await sandbox.get("/logs", self.run_dir / "logs" / result.rollout_id,
                                       max_bytes=self.config.logs_max_mb * MIB)
        except (SandboxError, OSError):
            return  # nothing to save (the sandbox died, or the harness wrote no logs)
        except Exception as exc:  # a copy must never cost the rollout its recorded outcome
            result.sandbox["logs"] = {"error": f"{type(exc).__name__}: {exc}"}
            return
        if copied.skipped or copied.truncated:
            result.sandbox["logs"] = copied.summary()


def network_mode(config: RolloutConfig, task: Task) -> NetworkMode:
    """The run's ``host`` overrides everything; otherwise the task's declaration, else the run's default."""
    if config.network == "host":
        return "host"
    return task.config.environment.network or config.network


def agent_user(config: RolloutConfig, task: Task) -> str:
    """Who the agent runs as: the run's override, else the task's (see ``Task.agent_user``)."""
    return config.agent_user or task.agent_user


def _died_under_verifier(result: RolloutResult, health: SandboxHealth) -> None:
    """The sandbox ended while the verifier ran: from inside (code the agent wrote, run by the verifier as root,
    ended its init) is the agent's doing; anything else is not the policy's."""
    if health.ended_from_inside:
        _ended_by_agent(result, health)
    else:
        result.status, result.reason = "infra_error", f"sandbox died during verification: {health.detail}"


def memory_room(harness: Harness, task: Task, at_rest_mb: float = 0.0) -> bool | None:
    """Whether the task's memory limit holds what the harness declares it needs (``Harness.memory_mb``) beside
    ``at_rest_mb``, what the sandbox held before the agent started (its services); None when limit or need is
    unset."""
    limit, need = task.config.environment.memory_mb, harness.memory_mb
    return limit - at_rest_mb >= need if limit and need else None


def _at_rest(result: RolloutResult) -> float:
    return float(result.sandbox.get("memory_at_rest_mb") or 0.0)


def _beside(result: RolloutResult) -> str:
    """The environment's own memory, when it counted in the limit's room (worded for reasons)."""
    at_rest = _at_rest(result)
    return f" beside the {at_rest:.0f} MB its environment held before the agent started" if at_rest >= 1 else ""


def _ended_by_agent(result: RolloutResult, health: SandboxHealth) -> None:
    result.status, result.reward = "failure", 0.0
    result.reason = f"the agent ended its own sandbox ({health.detail})"
    result.sandbox["ended_by_agent"] = True


def _killed(run: ExecResult) -> bool:
    """Whether the harness's own process ended by SIGKILL (the shell's 137, or a signal number) rather than by
    exiting: what an OOM kill of the harness looks like, as opposed to a harness that saw its command killed."""
    return not run.timed_out and signal_of(run.exit_code) == signal.SIGKILL


async def _ended(sandbox: Sandbox, settle_sec: float = 3.0) -> SandboxHealth | None:
    """The sandbox's health if it has ended, else None; an exec can fail a moment before the runtime's view of
    the sandbox (a pod informer's cache) shows why, so a live answer is re-asked for ``settle_sec``."""
    deadline = time.monotonic() + settle_sec
    while True:
        try:
            health = await sandbox.health()
        except ForgeError:
            return None
        if not health.running or health.oom_killed:
            return health
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.1)


def _closed(result: RolloutResult, started: float) -> RolloutResult:
    result.timings["total_s"] = time.monotonic() - started
    result.timings = {key: round(value, 3) for key, value in result.timings.items()}
    return result


def _usage(summary: dict[str, Any]) -> dict[str, float]:
    """Model time and tokens of a rollout, from the proxy's per-call telemetry (``*_ms`` summed over calls)."""
    calls = summary.get("calls", [])
    usage: dict[str, float] = {"calls": len(calls),
                               "engine_errors": sum(c.get("status") == "engine_error" for c in calls)}
    for call in calls:
        for key, value in call.items():
            if key.endswith(("_s", "_ms", "_tokens", "tokens_in", "tokens_out", "tokens_reused")) \
                    and isinstance(value, (int, float)):
                usage[key] = round(usage.get(key, 0) + value, 3)
    return usage


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
