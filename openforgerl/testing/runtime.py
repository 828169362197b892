"""A runtime double: sandboxes that run nothing, each following a scripted ``Scenario``.

``FakeRuntime(Scenario(agent=hangs(), verifier=reward(1.0)))`` plays a container engine for tests of
what sits above the ``Runtime`` ABC (the orchestrator's statuses, retries, run directories), with
no Docker. A sandbox's files live in a temp directory (sandbox paths map under it, as in the local
runtime), so ``put``/``get`` and the verifier's reward files are real files; commands are never
executed. Each ``exec`` is answered by the scenario:

- the verifier (a command ending in ``bash /tests/test.sh``) -> ``scenario.verifier``;
- any other command run as root (``user="0"``: the framework's housekeeping) -> exit 0;
- everything else (the harness's command) -> ``scenario.agent``.

A ``Step`` is ``async (sandbox, command, timeout) -> ExecResult``; the helpers below build the usual
ones (exit, hang until the timeout, write a file, die, be OOM-killed) and ``then`` chains them.
Invariant: every sandbox a ``FakeRuntime`` starts is listed in ``sandboxes`` and its ``removed`` flag
says whether the framework cleaned it up, so a test can assert that nothing is left behind.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from openforgerl.containers.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, CopyReport, copy_tree
from openforgerl.errors import ForgeError, SandboxError
from openforgerl.rollout.runtime import (
    LABEL_TASK,
    ExecResult,
    Runtime,
    RuntimeConfig,
    Sandbox,
    SandboxHealth,
    SandboxSpec,
)
from openforgerl.tasks import Task

VERIFIER_TAIL = ["bash", "/tests/test.sh"]
Step = Callable[["FakeSandbox", list[str], float | None], Awaitable[ExecResult]]


def exits(code: int = 0, stdout: str = "", stderr: str = "") -> Step:
    """The command ends with ``code`` and prints ``stdout`` / ``stderr``."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        return ExecResult(code, stdout, stderr, 0.0)
    return step


def hangs() -> Step:
    """The command never ends by itself: it runs until the exec's timeout kills it."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        await asyncio.sleep(timeout if timeout is not None else 3600.0)
        return ExecResult(None, "", "", timeout or 0.0, timed_out=True)
    return step


def takes(seconds: float, then: Step) -> Step:
    """The command runs ``seconds`` (if its timeout allows), then ends like ``then``."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        if timeout is not None and seconds >= timeout:
            return await hangs()(box, command, timeout)
        await asyncio.sleep(seconds)
        return replace(await then(box, command, timeout), seconds=seconds)
    return step


def writes(path: str, text: str, then: Step | None = None) -> Step:
    """The command writes ``text`` to the sandbox file ``path``, then behaves like ``then`` (exit 0)."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        box.write(path, text)
        return await (then or exits(0))(box, command, timeout)
    return step


def reward(value: Any, **metrics: Any) -> Step:
    """A verifier that writes ``{"reward": value, **metrics}`` to /logs/verifier/reward.json."""
    return writes("/logs/verifier/reward.json", json.dumps({"reward": value, **metrics}))


def dies(*, oom: bool = False, detail: str = "container exited (exit 137)", deadline: bool = False,
         storage_exceeded: bool = False, exec_fails: bool = False, from_inside: bool = False) -> Step:
    """The whole sandbox goes away while the command runs: killed, or OOM-killed with ``oom``; ended by its own
    deadline, or evicted for its writes; with ``from_inside``, its init ended by a process of its own. With
    ``exec_fails`` the runtime's exec itself fails (as a Kubernetes API server refuses an exec into a pod that
    has just ended) rather than returning the command's exit 137."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        box.alive, box.oom_killed, box.detail = False, oom, detail
        box.deadline, box.storage_exceeded, box.from_inside = deadline, storage_exceeded, from_inside
        if exec_fails:
            raise SandboxError(f"exec in sandbox {box.id}: HTTP 400 container not found")
        return ExecResult(137, "", "Killed", 0.0)
    return step


def leaves_writer(path: str, text: str, then: Step | None = None) -> Step:
    """The agent leaves a process behind that writes ``text`` to ``path`` while the verifier runs,
    unless the framework ended the agent's processes first (``Sandbox.end_processes``)."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        box.survivors.append((path, text))
        return await (then or exits(0))(box, command, timeout)
    return step


def oom_kills(then: Step | None = None) -> Step:
    """The kernel OOM-kills a process in the sandbox; the sandbox itself keeps running."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        box.oom_killed = True
        return await (then or exits(137, stderr="Killed"))(box, command, timeout)
    return step


def raises(error: Exception) -> Step:
    """The runtime itself fails while running the command (lost connection to the engine, a bug)."""
    async def step(box: FakeSandbox, command: list[str], timeout: float | None) -> ExecResult:
        raise error
    return step


@dataclass
class Scenario:
    """What one sandbox does: how its start, the agent's command and the verifier go."""

    agent: Step = field(default_factory=exits)
    verifier: Step = field(default_factory=lambda: reward(1.0))
    start_error: ForgeError | None = None
    """Raised by ``Runtime.start`` instead of starting (an image that cannot be had, an engine that is down)."""
    image_error: ForgeError | None = None
    """Raised by ``Runtime.image_for`` (the image or its harness layer cannot be made)."""


ScenarioFor = Callable[[SandboxSpec, int], Scenario]
"""Chooses the scenario of the n-th started sandbox (0-based) from its spec (labels name task, attempt)."""


class FakeRuntimeConfig(RuntimeConfig):
    type: Literal["fake"] = "fake"


class FakeRuntime(Runtime):
    """Starts ``FakeSandbox``es following ``scenario`` (one for all, or chosen per sandbox)."""

    name = "fake"
    Config = FakeRuntimeConfig

    def __init__(self, scenario: Scenario | ScenarioFor | None = None, config: RuntimeConfig | None = None, *,
                 check_error: ForgeError | None = None) -> None:
        super().__init__(config)
        self.choose: ScenarioFor = scenario if callable(scenario) else (lambda spec, n: scenario or Scenario())
        self.check_error = check_error
        """Raised by ``check`` (what a runtime says before a run when it cannot serve it at all)."""
        self.sandboxes: list[FakeSandbox] = []
        self.starts = 0
        self.checked: list[list[str]] = []

    async def check(self, tasks: Sequence[Task]) -> None:
        self.checked.append([task.name for task in tasks])
        if self.check_error is not None:
            raise self.check_error

    async def image_for(self, task: Task, tool: str | None) -> str:
        scenario = self.choose(SandboxSpec(image="", labels={LABEL_TASK: task.name}), self.starts)
        if scenario.image_error is not None:
            raise scenario.image_error
        return f"fake/{task.name}:{tool or 'none'}"

    async def start(self, spec: SandboxSpec) -> FakeSandbox:
        scenario = self.choose(spec, self.starts)
        self.starts += 1
        if scenario.start_error is not None:
            raise scenario.start_error
        box = FakeSandbox(spec, scenario)
        self.sandboxes.append(box)
        return box

    @property
    def left_running(self) -> list[FakeSandbox]:
        return [box for box in self.sandboxes if not box.removed]


class FakeSandbox(Sandbox):
    """Files in a temp dir; commands answered by the scenario; health as the steps left it."""

    def __init__(self, spec: SandboxSpec, scenario: Scenario) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="forge-fake-sandbox-"))
        super().__init__(self.root.name)
        self.spec, self.scenario = spec, scenario
        self.alive, self.oom_killed, self.detail = True, False, ""
        self.deadline = self.storage_exceeded = self.from_inside = False
        self.removed = False
        self.execs: list[tuple[list[str], str | None, dict[str, str]]] = []
        """Every command run, with the user it ran as and the environment it was given."""
        self.ended: list[str | None] = []
        """``end_processes`` calls, with the agent user each was given."""
        self.survivors: list[tuple[str, str]] = []
        """Writers the agent left running (``leaves_writer``): they write when the verifier runs."""
        self.written: set[str] = set()
        """Every path written through ``write`` (what ``changes`` reports)."""
        self.sees_changes = True

    def path(self, sandbox_path: str) -> Path:
        resolved = (self.root / sandbox_path.lstrip("/")).resolve()
        if resolved != self.root.resolve() and self.root.resolve() not in resolved.parents:
            raise SandboxError(f"path {sandbox_path!r} escapes the sandbox root")
        return resolved

    def write(self, sandbox_path: str, text: str) -> None:
        self.written.add(sandbox_path)
        target = self.path(sandbox_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def read(self, sandbox_path: str) -> str:
        return self.path(sandbox_path).read_text()

    def _require_alive(self) -> None:
        if not self.alive or self.removed:
            raise SandboxError(f"sandbox {self.id} is not running: {self.detail or 'removed'}")

    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        self._require_alive()
        argv = list(command)
        self.execs.append((argv, user, dict(env or {})))
        if argv[-2:] == VERIFIER_TAIL:
            for path, text in self.survivors:  # what the agent left running gets its chance now
                self.write(path, text)
            return await self.scenario.verifier(self, argv, timeout)
        if user == "0":
            return ExecResult(0, "", "", 0.0)
        return await self.scenario.agent(self, argv, timeout)

    async def make_dirs(self, paths: Sequence[str], *, owner: str | None = None, fresh: bool = False) -> None:
        self._require_alive()
        for sandbox_path in paths:
            target = self.path(sandbox_path)
            if fresh and target != self.root.resolve():
                shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True, exist_ok=True)

    async def put(self, src: Path, dest: str) -> None:
        self._require_alive()
        target = self.path(dest)
        target.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target / src.name, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target / src.name)

    async def get(self, src: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
        self._require_alive()
        source = self.path(src)
        if not source.exists():
            raise SandboxError(f"{src} does not exist in sandbox {self.id}")
        if source.is_dir():
            return copy_tree(source, dest, max_bytes=max_bytes, max_files=max_files)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / source.name)
        return CopyReport(files=1, bytes=source.stat().st_size)

    async def health(self) -> SandboxHealth:
        if self.removed:
            return SandboxHealth(False, detail="sandbox was removed")
        return SandboxHealth(self.alive, oom_killed=self.oom_killed, detail=self.detail, deadline=self.deadline,
                             storage_exceeded=self.storage_exceeded, ended_from_inside=self.from_inside)

    async def end_processes(self, agent_user: str | None) -> None:
        self._require_alive()
        self.ended.append(agent_user)
        self.survivors.clear()

    async def changes(self, under: Sequence[str]) -> list[str] | None:
        if not self.sees_changes:
            return None
        return sorted(p for p in self.written if any(p == r or p.startswith(r.rstrip("/") + "/") for r in under))

    async def written_bytes(self) -> int | None:
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file() and not f.is_symlink())

    async def _remove(self) -> None:
        self.removed = True
        shutil.rmtree(self.root, ignore_errors=True)


def scripted(by_task: Mapping[str, Scenario | Sequence[Scenario]], default: Scenario | None = None) -> ScenarioFor:
    """A ``ScenarioFor`` by task name; a sequence gives each successive sandbox of that task the next
    scenario (the last repeats), e.g. an infra error first and a clean run on the retry."""
    seen: dict[str, int] = {}

    def choose(spec: SandboxSpec, n: int) -> Scenario:
        task = spec.labels.get(LABEL_TASK, "")
        plan = by_task.get(task, default or Scenario())
        if isinstance(plan, Scenario):
            return plan
        index = seen.get(task, 0)
        if spec.image:  # a start, not an image look-up: advance
            seen[task] = index + 1
        return plan[min(index, len(plan) - 1)]
    return choose
