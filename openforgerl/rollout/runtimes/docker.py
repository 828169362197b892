"""The ``docker`` runtime: one container per rollout on a real Docker engine (docker SDK).

Invariant: every container is labelled with its run, rollout, task, attempt and the owning
process, is hardened (caps dropped, no-new-privileges, cpu/memory/pids limits), and is removed by
``stop``; ``sweep`` removes containers whose owner process on this host has died.
Each exec runs in its own session (``setsid -w``) so a timeout kills the whole process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import socket
import tarfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import docker.errors
from pydantic import Field

from openforgerl.containers.client import docker_client
from openforgerl.containers.images import check_bases_local, ensure_task_image
from openforgerl.containers.refs import ensure_local
from openforgerl.errors import ForgeError, SandboxError, UserError
from openforgerl.rollout.harness_image import harness_image
from openforgerl.rollout.runtime import (
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_RUN,
    ExecResult,
    Runtime,
    RuntimeConfig,
    Sandbox,
    SandboxHealth,
    SandboxSpec,
)
from openforgerl.stack.services import is_alive
from openforgerl.tasks import Task

# Docker's default capability set minus the ones an agent never needs (raw sockets, mknod, chroot,
# file capabilities, audit). Enough for apt, chown and su inside the sandbox.
DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")
KILL_GRACE_S = 10.0
OUTPUT_LIMIT = 4 * 1024 * 1024  # keep the last 4 MiB of each stream


class DockerRuntimeConfig(RuntimeConfig):
    """Settings of the docker runtime."""

    type: Literal["docker"] = "docker"
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAPS))
    """Capabilities kept after dropping ALL."""
    host_gateway: bool = True
    """With bridge networking, map host.docker.internal to the host (to reach the proxy)."""
    start_timeout_sec: float = 60.0
    """Docker API timeout for creating and starting a container."""


class DockerRuntime(Runtime):
    name = "docker"
    Config = DockerRuntimeConfig
    config: DockerRuntimeConfig

    def __init__(self, config: DockerRuntimeConfig | None = None) -> None:
        super().__init__(config)
        self._client: Any = None

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
        await asyncio.to_thread(self._check, tasks)

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

    async def image_for(self, task: Task, tool: str | None) -> str:
        """The task image (built once per environment content) plus the harness tools layer."""
        image, _ = await asyncio.to_thread(ensure_task_image, self.client, task)
        return await asyncio.to_thread(harness_image, self.client, image, tool)

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        return await asyncio.to_thread(self._start, spec)

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
        return DockerSandbox(self.client.containers.prepare_model({"Id": container_id}), spec)

    def _create(self, spec: SandboxSpec, labels: dict[str, str]) -> str:
        """Create (never pull: the low-level API does not, unlike ``containers.run``)."""
        api = self.client.api
        try:
            created = api.create_container(
                spec.image, ["sleep", "infinity"], detach=True, labels=labels, environment=spec.env,
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
            "network_mode": spec.network, "cap_drop": ["ALL"], "cap_add": self.config.cap_add,
            "security_opt": ["no-new-privileges"], "pids_limit": spec.pids_limit,
            "init": True,  # tini as PID 1 reaps what killed exec sessions leave behind
        }
        if spec.cpus:
            config["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory_mb:
            config["mem_limit"] = f"{spec.memory_mb}m"
            config["memswap_limit"] = f"{spec.memory_mb}m"  # no swap: an OOM is an OOM
        if spec.network == "bridge" and self.config.host_gateway:
            config["extra_hosts"] = {"host.docker.internal": "host-gateway"}
        return config

    async def sweep(self) -> int:
        return await asyncio.to_thread(self._sweep)

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
    def __init__(self, container: Any, spec: SandboxSpec) -> None:
        super().__init__(container.id[:12])
        self.container = container
        self.spec = spec

    @property
    def _api(self) -> Any:
        return self.container.client.api

    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        marker = f"/tmp/.forge-exec-{uuid.uuid4().hex[:12]}"
        # The shell records its pid (the session leader after setsid), then becomes the command.
        wrapped = ["setsid", "-w", "sh", "-c", f'echo $$ > {marker}; exec "$@"', "forge-exec", *command]
        exec_id = await asyncio.to_thread(self._create_exec, wrapped, user, env, cwd)
        started = time.monotonic()
        run = asyncio.ensure_future(asyncio.to_thread(self._api.exec_start, exec_id, demux=True))
        try:
            stdout, stderr = await asyncio.wait_for(asyncio.shield(run), timeout)
        except TimeoutError:
            await self._kill_session(marker)
            stdout, stderr = await _settle(run)
            return ExecResult(None, _text(stdout), _text(stderr), time.monotonic() - started, timed_out=True)
        code = (await asyncio.to_thread(self._api.exec_inspect, exec_id)).get("ExitCode")
        code, err = _signal_status(code, _text(stderr))
        return ExecResult(code, _text(stdout), err, time.monotonic() - started)

    def _create_exec(self, command: list[str], user: str | None, env: Mapping[str, str] | None,
                     cwd: str | None) -> str:
        try:
            return self._api.exec_create(self.container.id, command, user=user or self.spec.user or "",
                                         environment=dict(env or {}), workdir=cwd)["Id"]
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot exec in container {self.id}: {exc.explanation or exc}") from exc

    async def _kill_session(self, marker: str) -> None:
        script = (f'pid=$(cat {marker} 2>/dev/null) && kill -KILL -- -"$pid" 2>/dev/null; '
                  'pkill -KILL -s "$pid" 2>/dev/null; true')
        with _quiet():
            exec_id = await asyncio.to_thread(self._create_exec, ["sh", "-c", script], "0", None, None)
            await asyncio.to_thread(self._api.exec_start, exec_id)

    async def kill_strays(self) -> None:
        # Session 1 is docker-init and its child; field 6 of /proc/PID/stat is the session id.
        script = ('for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue; '
                  's=$(cut -d" " -f6 "$d/stat" 2>/dev/null) || continue; '
                  '[ "$s" = 1 ] || [ "$s" = $$ ] || kill -KILL "$p" 2>/dev/null; done; true')
        with _quiet():
            exec_id = await asyncio.to_thread(self._create_exec, ["sh", "-c", script], "0", None, None)
            await asyncio.to_thread(self._api.exec_start, exec_id)

    async def put(self, src: Path, dest: str) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(src), arcname=src.name)
        await self.exec(["mkdir", "-p", dest], user="0")
        ok = await asyncio.to_thread(self.container.put_archive, dest, buffer.getvalue())
        if not ok:
            raise SandboxError(f"copying {src} into {self.id}:{dest} failed")

    async def get(self, src: str, dest: Path) -> None:
        try:
            stream, _ = await asyncio.to_thread(self.container.get_archive, src)
            data = await asyncio.to_thread(lambda: b"".join(stream))
        except docker.errors.NotFound as exc:
            raise SandboxError(f"{src} does not exist in container {self.id}") from exc
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")

    async def health(self) -> SandboxHealth:
        try:
            await asyncio.to_thread(self.container.reload)
        except docker.errors.NotFound:
            return SandboxHealth(False, detail="container was removed")
        state = self.container.attrs.get("State", {})
        running = state.get("Status") == "running"
        if not running:
            return SandboxHealth(False, oom_killed=bool(state.get("OOMKilled")),
                                 detail=f"container {state.get('Status')} (exit {state.get('ExitCode')})")
        kills = await self._oom_kills()
        return SandboxHealth(True, oom_killed=kills > 0, detail=f"{kills} process(es) OOM-killed" if kills else "")

    async def _oom_kills(self) -> int:
        """Processes the kernel OOM-killed in this container's memory cgroup (v2 or v1)."""
        probe = await self.exec(["sh", "-c", "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control"
                                             " 2>/dev/null; true"], user="0", timeout=30)
        for line in probe.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    async def _remove(self) -> None:
        with _quiet():
            await asyncio.to_thread(self.container.remove, force=True)


async def _settle(run: asyncio.Future) -> tuple[bytes | None, bytes | None]:
    """Wait (bounded) for an exec whose session was killed, returning what it printed."""
    try:
        return await asyncio.wait_for(run, KILL_GRACE_S)
    except Exception:  # still stuck, or the exec errored: the output is lost, the timeout is not
        return None, None


_SETSID_SIGNALLED = re.compile(r"setsid: child \d+ did not exit normally[^\n]*\n?$")


def _signal_status(code: int | None, stderr: str) -> tuple[int | None, str]:
    """``setsid -w`` exits with the raw wait status when its child dies of a signal; report it the
    shell's way (128 + signal, so an OOM kill reads 137) and drop setsid's own message."""
    match = _SETSID_SIGNALLED.search(stderr)
    if code is None or not match:
        return code, stderr
    return 128 + (code & 0x7F), stderr[: match.start()]


def _text(data: bytes | None) -> str:
    if not data:
        return ""
    return data[-OUTPUT_LIMIT:].decode("utf-8", errors="replace")


def _quiet() -> contextlib.suppress:
    """Ignore Docker API errors during cleanup: the container may already be gone."""
    return contextlib.suppress(docker.errors.APIError, SandboxError)
