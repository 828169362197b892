"""Where a rollout runs: a ``Runtime`` starts one ``Sandbox`` per rollout (a container, a pod, a temp dir).

Invariant: a started sandbox is always removed. ``Runtime.sandbox()`` owns it as an async context
manager (the orchestrator runs every rollout inside one) and ``Sandbox.stop()`` (framework-owned,
idempotent, shielded from cancellation) runs on every exit path; implementations only provide the
``_remove`` hook. Every ``exec`` has a wall-clock
timeout after which its whole process tree is killed, and reports that as data, not an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from openforgerl.containers.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, CopyReport
from openforgerl.errors import SandboxError
from openforgerl.tasks import Task

# Labels every sandbox carries, so a sweep can find what a dead run left behind.
LABEL_RUN = "openforgerl.run"
LABEL_ROLLOUT = "openforgerl.rollout"
LABEL_TASK = "openforgerl.task"
LABEL_ATTEMPT = "openforgerl.attempt"
LABEL_OWNER_PID = "openforgerl.owner-pid"
LABEL_OWNER_HOST = "openforgerl.owner-host"


def is_ip(address: str) -> bool:
    """Whether ``address`` is an IP address (not a DNS name such as a cluster Service's)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def is_loopback(address: str) -> bool:
    """Whether ``address`` is this host's loopback (a DNS name, e.g. a cluster Service, never is)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


NetworkMode = Literal["isolated", "bridge", "host", "none"]
NETWORK_MODES: tuple[NetworkMode, ...] = get_args(NetworkMode)


@dataclass(frozen=True)
class Reach:
    """How sandboxes of one network mode reach this machine."""

    address: str | None
    """The address of this host they see (None: they cannot reach it at all)."""
    expose: Callable[[int], contextlib.AbstractContextManager[None]] = lambda port: contextlib.nullcontext()
    """While held, lets them reach ``port`` at ``address`` (a firewall opening); a no-op where nothing blocks."""


class SandboxSpec(BaseModel):
    """What to start for one rollout."""

    image: str
    """Image (docker) to run; ignored by the local runtime."""
    labels: dict[str, str] = Field(default_factory=dict)
    """run / rollout / task / attempt labels (see LABEL_*)."""
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    pids_limit: int | None = Field(4096, gt=0)
    network: NetworkMode = "isolated"
    """isolated: no route out, only the proxy's model API reachable; bridge: the same plus a route out;
    host: this host's own network (unsafe); none: no network at all."""
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/"
    user: str | None = None
    """Default user for exec (``uid:gid`` or a name); root when unset."""
    agent_user: str | None = None
    """Who the agent will run as; runtimes that fix a sandbox's users when it starts (kubernetes) pick
    their security profile from it."""
    storage_mb: int | None = Field(None, gt=0)
    """The task's storage cap; runtimes that enforce it at start (kubernetes' ephemeral storage) use it."""
    deadline_sec: float | None = Field(None, gt=0)
    """The longest the sandbox may live (start, agent and verifier budgets); runtimes that can end it
    on their own when it passes, even with the orchestrator gone, do (kubernetes' activeDeadlineSeconds)."""


@dataclass
class ExecResult:
    """How one command in a sandbox ended. ``exit_code`` is None when it was killed on timeout."""

    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def tail(self, chars: int = 600) -> str:
        return (self.stderr.strip() or self.stdout.strip())[-chars:]


@dataclass
class SandboxHealth:
    """Why a sandbox is gone, when it is: the orchestrator maps these to infra_error."""

    running: bool
    oom_killed: bool = False
    detail: str = ""
    deadline: bool = False
    """It was ended by its own deadline (``SandboxSpec.deadline_sec``): an agent timeout in the agent phase."""
    storage_exceeded: bool = False
    """It was ended for writing past ``SandboxSpec.storage_mb`` (an eviction): the policy's doing, reward 0."""
    ended_from_inside: bool = False
    """It ended because a process inside it ended its init (no kill, stop or OOM kill came from outside): while the
    agent runs, the agent's doing (reward 0), never an infra error a policy could use to have a failure discarded."""


class Sandbox(ABC):
    """One running sandbox. Subclasses implement the hooks; ``stop`` is the framework's."""

    fresh_step: ClassVar[str] = 'rm -rf -- "$@"'
    """How ``make_dirs(fresh=True)`` clears its paths (a shell step over ``"$@"``)."""

    def __init__(self, sandbox_id: str) -> None:
        self.id = sandbox_id
        self._stopped = False

    @abstractmethod
    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        """Run ``command``; on timeout kill its process tree and return ``timed_out=True``."""

    @abstractmethod
    async def put(self, src: Path, dest: str) -> None:
        """Copy a host file or directory to ``dest`` (a directory path) in the sandbox."""

    @abstractmethod
    async def get(self, src: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
        """Copy a sandbox file or directory into the host directory ``dest``: regular files and
        directories only (links and special files are skipped and named), stopping at the caps.
        Raises SandboxError when ``src`` does not exist."""

    @abstractmethod
    async def health(self) -> SandboxHealth:
        """Whether the sandbox still runs, and if not why (OOM, killed, ...)."""

    @abstractmethod
    async def _remove(self) -> None:
        """Hook: delete the sandbox and everything in it. Must tolerate it being gone already."""

    async def make_dirs(self, paths: Sequence[str], *, owner: str | None = None, fresh: bool = False) -> None:
        """Create directories as root; ``fresh`` deletes them first, ``owner`` (``uid:gid``) gets them
        recursively. Raises SandboxError when it cannot. Runtimes whose paths are not the host's own
        (local) override it; the default runs a shell inside the sandbox."""
        steps = ([self.fresh_step] if fresh else []) + ['mkdir -p -- "$@"']
        if owner:
            steps.append('chown -R -- "$FORGE_OWNER" "$@"')
        result = await self.exec(["sh", "-c", " && ".join(steps), "forge-dirs", *paths], user="0", timeout=60,
                                 env={"FORGE_OWNER": owner} if owner else None)
        if not result.ok:
            raise SandboxError(f"could not {'reset' if fresh else 'create'} {', '.join(paths)} in sandbox "
                               f"{self.id}: {result.tail(300) or 'timed out'}")

    async def end_processes(self, agent_user: str | None) -> None:
        """Framework step after the agent phase: end every process the agent could have started, from
        outside the sandbox and with no help from anything inside it, keeping the files. ``agent_user``
        is who the agent ran as (None: root). Default: nothing (a runtime whose sandboxes cannot
        outlive an exec); runtimes override it."""

    async def changes(self, under: Sequence[str]) -> list[str] | None:
        """Paths below any of ``under`` that were added, changed or deleted since the sandbox started,
        seen from outside it; None when this runtime cannot tell (the integrity guard then says so)."""
        return None

    async def written_bytes(self) -> int | None:
        """Bytes the sandbox has written to its own filesystem so far; None when this runtime cannot tell."""
        return None

    async def memory_in_use(self) -> int | None:
        """Bytes of anonymous memory (heaps, stacks: what reclaim cannot drop) the sandbox's processes hold now;
        None when this runtime cannot tell. Read before the agent starts, it is what the environment's own
        services take of ``memory_mb``."""
        return None

    async def stop(self) -> None:
        """Remove the sandbox; idempotent and shielded so a cancelled rollout still cleans up."""
        if self._stopped:
            return
        self._stopped = True
        await asyncio.shield(self._remove())


class RuntimeConfig(BaseModel):
    """Settings of a runtime; each runtime subclasses it with ``type: Literal["its name"]``."""

    model_config = ConfigDict(extra="forbid")

    type: str


class Runtime(ABC):
    """Starts sandboxes. One instance serves a whole run, concurrently."""

    name: ClassVar[str] = "runtime"
    Config: ClassVar[type[RuntimeConfig]] = RuntimeConfig
    """This runtime's settings model; ``runtime:`` in a run config is validated against it."""

    def __init__(self, config: RuntimeConfig | None = None) -> None:
        """Every runtime is built as ``cls(config=settings)`` from its settings alone (``make_runtime``)."""
        self.config = config or self.Config(type=self.name)

    @abstractmethod
    async def start(self, spec: SandboxSpec) -> Sandbox:
        """Start a sandbox; raises SandboxError (an infra failure) when it cannot."""

    def size(self, concurrency: int) -> None:
        """Hook: how many rollouts the run keeps going at once, for runtimes that size pools by it."""

    async def check(self, tasks: Sequence[Task]) -> None:
        """Hook: before a run starts, raise a ForgeError (one line, with the fix) for anything that would
        fail every rollout of ``tasks`` here (no engine, an image that cannot be had)."""

    async def reach(self, modes: set[NetworkMode]) -> dict[NetworkMode, Reach]:
        """Hook: make the networks of ``modes`` ready and say how their sandboxes reach this host.

        Default (sandboxes that are processes of this host): every mode reaches it on loopback."""
        return {mode: Reach(None if mode == "none" else "127.0.0.1") for mode in modes}

    async def image_for(self, task: Task, tool: str | None) -> str:
        """Hook: the image a rollout of ``task`` runs in, with the harness tools ``tool`` (None: no
        harness files). Raises SandboxError when it cannot be made (an infra failure)."""
        return task.config.environment.docker_image or ""

    async def sweep(self) -> int:
        """Remove sandboxes left by runs whose owner process is gone; returns how many."""
        return 0

    async def release(self) -> None:
        """Hook: the run is over; remove what the runtime made for it beyond its sandboxes (network
        policies, watches). Idempotent."""

    @contextlib.asynccontextmanager
    async def sandbox(self, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
        box = await self.start(spec)
        try:
            yield box
        finally:
            await box.stop()
