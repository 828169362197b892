"""The ``docker`` runtime: one container per rollout on a real Docker engine (docker SDK).

Invariant: every container is labelled with its run, rollout, task, attempt and the owning
process, is hardened (caps dropped, no-new-privileges, cpu/memory/pids limits), and is removed by
``stop``; ``sweep`` removes containers whose owner process on this host has died.
Each exec runs in its own session (``setsid -w``) so a timeout kills the whole process tree.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import docker.errors
from pydantic import Field

from openforgerl.containers.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, CopyReport, extract, put_archive
from openforgerl.containers.client import docker_client
from openforgerl.containers.images import check_bases_local, ensure_task_image
from openforgerl.containers.network import SPECS, NetworkKind, ensure_network, open_port
from openforgerl.containers.refs import ensure_local
from openforgerl.errors import ForgeError, SandboxError, UserError
from openforgerl.log import get_logger
from openforgerl.processes import is_alive
from openforgerl.rollout.harness_image import harness_image
from openforgerl.rollout.integrity import guarded_roots
from openforgerl.rollout.runtime import (
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_RUN,
    ExecResult,
    NetworkMode,
    Reach,
    Runtime,
    RuntimeConfig,
    Sandbox,
    SandboxHealth,
    SandboxSpec,
)
from openforgerl.rollout.runtimes import docker_host
from openforgerl.tasks import Task

log = get_logger(__name__)

# Docker's default capability set minus the ones an agent never needs (raw sockets, mknod, chroot,
# file capabilities, audit). Enough for apt, chown and su inside the sandbox.
DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")
KILL_GRACE_S = 10.0
EVENT_SETTLE_S = 1.0  # how long Docker's kill/stop event for a stopped container may lag its exit
KEEPALIVE = ["sleep", "infinity"]  # every sandbox's command, after the image's entrypoint
ENTRYPOINT_WAIT_S = 30.0  # how long a sandbox waits for its image's entrypoint to exec KEEPALIVE
THAW_SECONDS = 30.0  # how long Docker may go on reporting a container paused that forge unpaused
T = TypeVar("T")
DockerCall = Callable[..., Awaitable[Any]]
"""``DockerRuntime.call``: run a blocking Docker call on the runtime's threads (``urgent=True``: the kill pool)."""
DOCKER_NETWORKS: dict[NetworkMode, str] = {"isolated": SPECS["isolated"].name, "bridge": SPECS["egress"].name,
                                           "host": "host", "none": "none"}
NETWORK_KINDS: dict[NetworkMode, NetworkKind] = {"isolated": "isolated", "bridge": "egress"}
OUTPUT_LIMIT = 4 * 1024 * 1024  # keep the last 4 MiB of each stream


class DockerRuntimeConfig(RuntimeConfig):
    """Settings of the docker runtime."""

    type: Literal["docker"] = "docker"
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAPS))
    """Capabilities kept after dropping ALL."""
    host_firewall: bool = True
    """Reject everything on the sandbox bridges but the proxy's port (iptables, needs root). Off: a
    host service listening on all addresses (0.0.0.0) is reachable from sandboxes; a warning is logged."""
    start_timeout_sec: float = 60.0
    """Docker API timeout for creating and starting a container."""


class DockerRuntime(Runtime):
    name = "docker"
    Config = DockerRuntimeConfig
    config: DockerRuntimeConfig

    def __init__(self, config: DockerRuntimeConfig | None = None) -> None:
        super().__init__(config)
        self._client: Any = None
        self._pool = ThreadPoolExecutor(max_workers=3 * 4 + 8, thread_name_prefix="forge-docker")
        # Ending a timed-out exec never waits behind the calls it is meant to cut short.
        self._urgent = ThreadPoolExecutor(max_workers=4, thread_name_prefix="forge-docker-kill")
        self._entrypoint_holds: set[str] = set()  # images whose entrypoint never exec'd KEEPALIVE in time

    def size(self, concurrency: int) -> None:
        """Every agent holds a thread for its whole exec; the rest (start, copy, inspect) need their own."""
        self._pool.shutdown(wait=False)
        self._pool = ThreadPoolExecutor(max_workers=3 * concurrency + 8, thread_name_prefix="forge-docker")

    async def call(self, fn: Callable[..., T], *args: Any, urgent: bool = False, **kwargs: Any) -> T:
        """``fn`` (a blocking Docker call) on the runtime's own threads, never the default executor."""
        pool = self._urgent if urgent else self._pool
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = docker_client(timeout=self.config.start_timeout_sec)
            except ForgeError as exc:  # a rollout records this as an infra error
                raise SandboxError(f"docker engine unavailable: {exc.what}", fix=exc.fix) from exc
        return self._client

    async def check(self, tasks: Sequence[Task]) -> None:
        """The engine answers, and every task's image is local or can be had from a loopback registry
        (pulled now, once, rather than by every rollout) or built from its environment/."""
        await self.call(self._check, tasks)

    def _check(self, tasks: Sequence[Task]) -> None:
        client = self.client
        for image in sorted({t.config.environment.docker_image for t in tasks if t.config.environment.docker_image}):
            ensure_local(client, image, UserError, fix="publish the task with forge build-env (it pushes the image "
                                                        "to the local registry), or fix [environment] docker_image")
        for task in tasks:
            if not task.config.environment.docker_image:
                if not task.dockerfile.is_file():
                    raise UserError(f"{task.path}: neither [environment] docker_image nor environment/Dockerfile",
                                    fix="run forge build-env on it (templated environments are rendered there)")
                check_bases_local(client, task.dockerfile)

    async def reach(self, modes: set[NetworkMode]) -> dict[NetworkMode, Reach]:
        """isolated and bridge sandboxes reach this host at their network's gateway, through its firewall."""
        reach: dict[NetworkMode, Reach] = {}
        for mode in modes:
            if mode in ("isolated", "bridge"):
                network = await self.call(ensure_network, self.client, NETWORK_KINDS[mode])
                reach[mode] = Reach(network.gateway, self._exposer(network.bridge))
            else:
                reach[mode] = Reach("127.0.0.1" if mode == "host" else None)
        return reach

    def _exposer(self, bridge: str) -> Callable[[int], contextlib.AbstractContextManager[None]]:
        if not self.config.host_firewall:
            log.warning("runtime.host_firewall is off: sandboxes can reach every service of this host that "
                        "listens on all addresses")
            return lambda port: contextlib.nullcontext()
        return lambda port: open_port(bridge, port)

    async def image_for(self, task: Task, tool: str | None) -> str:
        """The task image (built once per environment content) plus the harness tools layer."""
        image, _ = await self.call(ensure_task_image, self.client, task)
        return await self.call(harness_image, self.client, image, tool)

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        return await self.call(self._start, spec)

    def _start(self, spec: SandboxSpec) -> DockerSandbox:
        labels = {**spec.labels, LABEL_OWNER_PID: str(os.getpid()), LABEL_OWNER_HOST: socket.gethostname()}
        try:
            container_id = self._create(spec, labels)
        except docker.errors.ImageNotFound:  # only now pay for the look-up (and a pull from loopback)
            ensure_local(self.client, spec.image, SandboxError,
                         fix="build it (forge build-env) or fix the task's image")
            container_id = self._create(spec, labels)
        try:
            self.client.api.start(container_id)
        except docker.errors.APIError as exc:
            self.client.api.remove_container(container_id, force=True)
            raise SandboxError(f"docker could not start {spec.image}: {exc.explanation or exc}") from exc
        try:
            host = docker_host.view(self.client.api, container_id)
        except (docker.errors.APIError, KeyError, ValueError) as exc:
            self.client.api.remove_container(container_id, force=True)
            raise SandboxError(f"container of {spec.image} vanished after it started: {exc}") from exc
        self._await_entrypoint(spec.image, host.init_pid)
        return DockerSandbox(self.client.containers.prepare_model({"Id": container_id}), spec, host, self.call)

    def _await_entrypoint(self, image: str, init_pid: int) -> None:
        """Wait until the image's entrypoint has exec'd the sandbox's command: by Docker's convention an
        entrypoint starts the environment's services, waits for them, then execs its command (forge's claw and
        GUI templates do), so the agent starts on an environment that is up, and what it then holds is the
        environment's own memory. An image whose entrypoint does not exec it within ENTRYPOINT_WAIT_S is
        warned about once and not waited for again."""
        if image in self._entrypoint_holds:
            return
        deadline = time.monotonic() + ENTRYPOINT_WAIT_S
        while docker_host.runs_command(init_pid, KEEPALIVE) is False:
            if time.monotonic() > deadline:
                self._entrypoint_holds.add(image)
                log.warning("the entrypoint of %s did not exec its command (%s) within %.0f s: its sandboxes' "
                            "agents start without waiting for it (an entrypoint should end with exec \"$@\")",
                            image, " ".join(KEEPALIVE), ENTRYPOINT_WAIT_S)
                return
            time.sleep(0.02)

    def _create(self, spec: SandboxSpec, labels: dict[str, str]) -> str:
        """Create (never pull: the low-level API does not, unlike ``containers.run``)."""
        api = self.client.api
        try:
            created = api.create_container(
                spec.image, KEEPALIVE, detach=True, labels=labels, environment=spec.env,
                working_dir=spec.workdir, name=f"forge-{labels.get(LABEL_RUN, 'run')[:24]}-{uuid.uuid4().hex[:8]}",
                host_config=api.create_host_config(**self._host_config(spec)))
        except docker.errors.ImageNotFound:
            raise
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker could not create a container of {spec.image}: {exc.explanation or exc}"
                               ) from exc
        return created["Id"]

    def _host_config(self, spec: SandboxSpec) -> dict[str, Any]:
        config: dict[str, Any] = {
            "network_mode": DOCKER_NETWORKS[spec.network], "cap_drop": ["ALL"], "cap_add": self.config.cap_add,
            "security_opt": ["no-new-privileges"], "pids_limit": spec.pids_limit,
            "init": True,  # tini as PID 1 reaps what killed exec sessions leave behind
        }
        if spec.cpus:
            config["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory_mb:
            config["mem_limit"] = f"{spec.memory_mb}m"
            config["memswap_limit"] = f"{spec.memory_mb}m"  # no swap: an OOM is an OOM
        return config

    async def sweep(self) -> int:
        return await self.call(self._sweep)

    def _sweep(self) -> int:
        host, removed = socket.gethostname(), 0
        # sparse: no per-container inspect, which races with containers other runs remove meanwhile
        for container in self.client.containers.list(all=True, sparse=True, filters={"label": LABEL_RUN}):
            labels = container.attrs.get("Labels") or {}
            if labels.get(LABEL_OWNER_HOST) != host or is_alive(int(labels.get(LABEL_OWNER_PID, "0") or 0)):
                continue
            with _quiet():  # already gone is fine
                container.remove(force=True)
                removed += 1
        return removed


class DockerSandbox(Sandbox):
    """A container. Ending processes, reading changes and bounding output are done from the host
    (``docker_host``) whenever forge may read the host's /proc and the container's layer; otherwise
    through the Docker API. Nothing that decides a reward runs a program of the container's."""

    def __init__(self, container: Any, spec: SandboxSpec, host: docker_host.HostView, call: DockerCall) -> None:
        super().__init__(container.id[:12])
        self.container = container
        self.spec = spec
        self.host = host
        self._call = call
        self._since = time.time() - 1
        """Since when the container's life is its own: its start (no event of it can be older), or the end of our
        last restart's kill."""
        self._isolate()
        self._baseline: dict[str, docker_host.Signature] | set[str] = self._snapshot()

    def _isolate(self) -> None:
        """Docker (before 26) gives an internal network's containers a default route; egress is dropped
        anyway, but no route at all is the simpler guarantee."""
        if self.spec.network == "isolated" and not docker_host.drop_default_route(self.host.init_pid):
            log.debug("could not remove the default route of %s (nsenter and ip needed on the host)", self.id)

    @property
    def _api(self) -> Any:
        return self.container.client.api

    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        # setsid -w: the command leads its own session, so a timeout ends all it started.
        wrapped = ["setsid", "-w", *command]
        exec_id = await self._call(self._create_exec, wrapped, user, env, cwd)
        started = time.monotonic()
        run = asyncio.ensure_future(self._call(self._output, exec_id))
        try:
            stdout, stderr = await asyncio.wait_for(asyncio.shield(run), timeout)
        except TimeoutError:
            await self._kill_session(exec_id)
            stdout, stderr = await _settle(run)
            return ExecResult(None, _text(stdout), _text(stderr), time.monotonic() - started, timed_out=True)
        code = (await self._call(self._api.exec_inspect, exec_id)).get("ExitCode")
        code, err = _signal_status(code, _text(stderr))
        return ExecResult(code, _text(stdout), err, time.monotonic() - started)

    def _output(self, exec_id: str) -> tuple[bytes, bytes]:
        """The exec's output as it streams, keeping the last OUTPUT_LIMIT bytes of each stream (linear cost
        whatever it prints)."""
        stdout, stderr = Tail(OUTPUT_LIMIT), Tail(OUTPUT_LIMIT)
        for out, err in self._unpaused(self._api.exec_start, exec_id, stream=True, demux=True):
            stdout.add(out)
            stderr.add(err)
        return stdout.value(), stderr.value()

    def _create_exec(self, command: list[str], user: str | None, env: Mapping[str, str] | None,
                     cwd: str | None) -> str:
        try:
            return self._unpaused(self._api.exec_create, self.container.id, command, user=user or self.spec.user or "",
                                  environment=dict(env or {}), workdir=cwd)["Id"]
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot exec in container {self.id}: {exc.explanation or exc}") from exc

    async def _kill_session(self, exec_id: str) -> None:
        """End a timed-out exec's whole session from the host; without host access, restart the container."""
        exec_pid = (await self._call(self._api.exec_inspect, exec_id, urgent=True)).get("Pid") or 0
        sessions = docker_host.exec_sessions(exec_pid) if exec_pid else set()
        if not sessions:
            await self._restart()
            return
        docker_host.kill([pid for sid in sessions for pid in docker_host.session_members(self.host.init_pid, sid)])

    async def end_processes(self, agent_user: str | None) -> None:
        """An unprivileged agent's processes are killed from the host while the container is frozen (no
        fork can slip through; root's services keep running); after a root agent, which could have
        tampered with any process, the container is restarted: every process ends, the files stay."""
        if _is_root(agent_user) or not await self._call(self._kill_unprivileged, urgent=True):
            await self._restart()

    def _kill_unprivileged(self) -> bool:
        if docker_host.unprivileged_processes(self.host.init_pid) is None:
            return False
        try:
            self._api.pause(self.container.id)
        except Exception:  # noqa: BLE001 (a timeout too): the freeze may have happened all the same
            self._thaw()
            return False
        try:
            docker_host.kill(docker_host.unprivileged_processes(self.host.init_pid) or [])
        finally:
            self._thaw()
        deadline = time.monotonic() + 5
        while docker_host.unprivileged_processes(self.host.init_pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        return not docker_host.unprivileged_processes(self.host.init_pid)

    def _thaw(self) -> None:
        """Unpause, until Docker says the container is not paused. A pause or unpause that failed or timed out
        under load must not leave the container frozen for the verifier; nor may Docker's own bookkeeping: it
        marks a container paused again when it handles containerd's pause event after the unpause that
        followed it, until the resume event comes (the container runs; Docker refuses execs, "is paused")."""
        deadline, delay = time.monotonic() + THAW_SECONDS, 0.05
        while True:
            try:
                if not self._api.inspect_container(self.container.id)["State"].get("Paused"):
                    return
                self._api.unpause(self.container.id)
                refused = False
            except docker.errors.NotFound as exc:
                raise SandboxError(f"container {self.id} was removed") from exc
            except Exception:  # noqa: BLE001 (a timeout too; the next look decides)
                refused = True
            if time.monotonic() > deadline:
                raise SandboxError(f"container {self.id} stays paused {THAW_SECONDS:.0f} s after forge unpaused it")
            if refused:
                time.sleep(delay)
                delay = min(2 * delay, 1.0)

    def _unpaused(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call``, made again once the container is thawed if Docker refused it as paused. Only
        ``end_processes`` pauses, and it has unpaused before it returns: a later "is paused" is stale."""
        for _ in range(2):
            try:
                return call(*args, **kwargs)
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or "paused" not in str(exc.explanation or exc):
                    raise
            self._thaw()
        return call(*args, **kwargs)

    async def _restart(self) -> None:
        def restart() -> None:
            self._thaw()
            state = self._api.inspect_container(self.container.id)["State"]
            if not state.get("Running"):  # it died under the agent: that is not ours to heal
                raise SandboxError(f"container {self.id} stopped during the agent phase (exit {state.get('ExitCode')})")
            self._api.kill(self.container.id)
            self._api.wait(self.container.id, timeout=30)
            self._since = time.time()  # after our own kill's event: only what comes later counts
            self._api.start(self.container.id)
            self.host = docker_host.view(self._api, self.container.id)
            self._isolate()  # a restarted container has a new network namespace
        try:
            await self._call(restart, urgent=True)
        except (docker.errors.APIError, OSError) as exc:
            raise SandboxError(f"could not restart container {self.id} to end the agent's processes: {exc}") from exc

    def _snapshot(self) -> dict[str, docker_host.Signature] | set[str]:
        if self.host.upper is not None:
            return docker_host.snapshot(self.host.upper, guarded_roots())
        return {change["Path"] for change in self._api.diff(self.container.id) or []}

    async def changes(self, under: Sequence[str]) -> list[str] | None:
        def read() -> list[str]:
            now = self._snapshot()
            if isinstance(now, dict) and isinstance(self._baseline, dict):
                changed = docker_host.changed_since(self._baseline, now)
            else:
                changed = sorted(set(now) - set(self._baseline))
            return docker_host.without_ancestors([path for path in changed if _below(path, under)])
        return await self._call(read)

    async def written_bytes(self) -> int | None:
        if self.host.upper is not None:
            return await self._call(docker_host.layer_bytes, self.host.upper)
        attrs = await self._call(self._api.inspect_container, self.container.id, size=True)
        return attrs.get("SizeRw")

    async def put(self, src: Path, dest: str) -> None:
        # The target must exist. (A tar of its directories would reset the mode of existing ones, /tmp's
        # sticky 1777 included.) Files are put by root before the agent runs or after the guard passed.
        await self.make_dirs([dest])
        if not await self._call(self.container.put_archive, dest, put_archive(src)):
            raise SandboxError(f"copying {src} into {self.id}:{dest} failed")

    async def get(self, src: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
        def copy() -> CopyReport:
            try:
                stream, _ = self.container.get_archive(src)
            except docker.errors.NotFound as exc:
                raise SandboxError(f"{src} does not exist in container {self.id}") from exc
            try:
                return extract(stream, dest, max_bytes=max_bytes, max_files=max_files)
            finally:
                stream.close()
        return await self._call(copy)

    async def health(self) -> SandboxHealth:
        try:
            await self._call(self.container.reload)
        except docker.errors.NotFound:
            return SandboxHealth(False, detail="container was removed")
        state = self.container.attrs.get("State", {})
        running = state.get("Status") == "running"
        if not running:
            # Docker marks a container OOMKilled when any of its processes was, however it then ended: only an
            # init that died of SIGKILL (137) may be the OOM killer's victim; one that exited otherwise after a
            # command of the agent's was OOM-killed (a root agent's `kill 1`) was ended from inside.
            oom, code = bool(state.get("OOMKilled")), state.get("ExitCode")
            inside = await self._call(self._ended_from_inside) and not (oom and code == 137)
            detail = f"container {state.get('Status')} (exit {code})"
            if inside:
                detail += ": its init was ended from inside" + (" after an OOM kill in it" if oom else "")
            return SandboxHealth(False, oom_killed=oom and not inside, ended_from_inside=inside, detail=detail)
        kills = docker_host.oom_kills(self.host.init_pid) or 0
        return SandboxHealth(True, oom_killed=kills > 0, detail=f"{kills} process(es) OOM-killed" if kills else "")

    async def memory_in_use(self) -> int | None:
        found = docker_host.memory_cgroup(self.host.init_pid)
        return docker_host.anon_memory(*found) if found else None

    def _ended_from_inside(self, settle_s: float = EVENT_SETTLE_S) -> bool:
        """Whether the container stopped with no kill or stop from outside since ``_since``: Docker records a
        ``kill`` event for every signal it sends (``docker kill``/``stop``, its own shutdown, our restarts), none
        for a process inside ending PID 1 (the kernel's OOM kills are read from its state). Docker logs ``kill`` after
        the signal is sent, so a SIGKILLed container can read as exited before its event exists: events are
        awaited until ``settle_s`` from now (the answer comes at the first one; only a container with none waits
        the whole window). Unknown (the events API failed) reads as from outside: an infra error, as before."""
        try:
            events = self._api.events(since=self._since, until=time.time() + settle_s, decode=True, filters={
                "container": self.container.id, "event": ["kill", "stop"]})
            try:
                return not any(True for _ in events)
            finally:
                with contextlib.suppress(Exception):
                    events.close()
        except Exception:  # noqa: BLE001 (no answer is no evidence)
            return False

    async def _remove(self) -> None:
        with _quiet():
            await self._call(self.container.remove, force=True, urgent=True)


def _is_root(user: str | None) -> bool:
    return not user or user.split(":")[0] in ("root", "0")


def _below(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


async def _settle(run: asyncio.Future) -> tuple[bytes | None, bytes | None]:
    """Wait (bounded) for an exec whose session was killed, returning what it printed."""
    try:
        return await asyncio.wait_for(run, KILL_GRACE_S)
    except Exception:  # still stuck, or the exec errored: the output is lost, the timeout is not
        return None, None


_SETSID_SIGNALLED = re.compile(r"setsid: child \d+ did not exit normally[^\n]*\n?")


def _signal_status(code: int | None, stderr: str) -> tuple[int | None, str]:
    """``setsid -w`` exits with the raw wait status when its child dies of a signal; report it the
    shell's way (128 + signal, so an OOM kill reads 137) and drop setsid's own message. Processes the child
    left behind may print after it (a subshell reporting its own children killed), so it is the last such
    message, wherever it is."""
    if code is None:
        return code, stderr
    match = next(reversed(list(_SETSID_SIGNALLED.finditer(stderr))), None)
    if match is None:
        return code, stderr
    return 128 + (code & 0x7F), stderr[: match.start()] + stderr[match.end():]


class Tail:
    """The last ``limit`` bytes of a stream, kept in chunks: adding costs the chunk, not what came before."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.chunks: collections.deque[bytes] = collections.deque()

    def add(self, chunk: bytes | None) -> None:
        if not chunk:
            return
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.chunks and self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())

    def value(self) -> bytes:
        return b"".join(self.chunks)[-self.limit:]


def _text(data: bytes | None) -> str:
    if not data:
        return ""
    return data[-OUTPUT_LIMIT:].decode("utf-8", errors="replace")


def _quiet() -> contextlib.suppress:
    """Ignore Docker API errors during cleanup: the container may already be gone."""
    return contextlib.suppress(docker.errors.APIError, SandboxError)
