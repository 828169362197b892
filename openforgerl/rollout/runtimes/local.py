"""The ``local`` runtime: a temp directory and a process group per rollout, for machines with no engine.

Invariant: sandbox paths map under the sandbox's root directory (``/app/x`` -> ``ROOT/app/x``) for
``put``/``get``, commands run with ``cwd`` and ``HOME`` inside that root and ``FORGE_SANDBOX_ROOT`` set,
and every command runs in its own session so a timeout kills its whole process tree. This is
isolation by convention only (no namespaces): use it for trusted tasks written with relative paths.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from openforgerl.containers.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, CopyReport, copy_tree
from openforgerl.errors import SandboxError, UserError
from openforgerl.rollout.runtime import ExecResult, Runtime, RuntimeConfig, Sandbox, SandboxHealth, SandboxSpec
from openforgerl.tasks import Task

OUTPUT_LIMIT = 4 * 1024 * 1024


class LocalRuntimeConfig(RuntimeConfig):
    """Settings of the local runtime."""

    type: Literal["local"] = "local"
    base_dir: str | None = None
    """Where sandbox directories are created (default: the system temp dir)."""


class LocalRuntime(Runtime):
    name = "local"
    Config = LocalRuntimeConfig
    config: LocalRuntimeConfig

    def __init__(self, config: LocalRuntimeConfig | None = None) -> None:
        super().__init__(config)

    async def check(self, tasks: Sequence[Task]) -> None:
        """Limits this runtime cannot hold are refused, never silently ignored."""
        for task in tasks:
            if task.config.environment.storage_mb:
                raise UserError(f"{task.path}: [environment] storage_mb is not enforced by the local runtime",
                                fix="run it on the docker runtime, or remove storage_mb")

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        root = Path(tempfile.mkdtemp(prefix="forge-sandbox-", dir=self.config.base_dir))
        (root / "home").mkdir()
        return LocalSandbox(root, spec)


class LocalSandbox(Sandbox):
    def __init__(self, root: Path, spec: SandboxSpec) -> None:
        super().__init__(root.name)
        self.root = root
        self.spec = spec
        self.sessions: set[int] = set()
        """Process groups its commands started (each command runs in a session of its own)."""

    def host_path(self, sandbox_path: str) -> Path:
        """Map an absolute or relative sandbox path into the root (never outside it)."""
        resolved = (self.root / sandbox_path.lstrip("/")).resolve()
        if resolved != self.root.resolve() and self.root.resolve() not in resolved.parents:
            raise SandboxError(f"path {sandbox_path!r} escapes the sandbox root")
        return resolved

    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        full_env = {**os.environ, **self.spec.env, **(env or {}), "HOME": str(self.root / "home"),
                    "FORGE_SANDBOX_ROOT": str(self.root)}
        workdir = self.host_path(cwd or self.spec.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, cwd=workdir, env=full_env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return ExecResult(127, "", f"cannot run {command[0]}: {exc}", time.monotonic() - started)
        self.sessions.add(proc.pid)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            out, err = await proc.communicate()
            return ExecResult(None, _text(out), _text(err), time.monotonic() - started, timed_out=True)
        finally:
            if proc.returncode is None:  # cancelled: never leave the tree behind
                _kill_group(proc.pid)
        return ExecResult(proc.returncode, _text(out), _text(err), time.monotonic() - started)

    async def put(self, src: Path, dest: str) -> None:
        target = self.host_path(dest)
        target.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            await asyncio.to_thread(shutil.copytree, src, target / src.name, dirs_exist_ok=True)
        else:
            await asyncio.to_thread(shutil.copy2, src, target / src.name)

    async def get(self, src: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
        source = self.host_path(src)
        if not source.exists():
            raise SandboxError(f"{src} does not exist in sandbox {self.id}")
        if source.is_dir():
            return await asyncio.to_thread(copy_tree, source, dest, max_bytes=max_bytes, max_files=max_files)
        dest.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copy2, source, dest / source.name)
        return CopyReport(files=1, bytes=source.stat().st_size)

    async def make_dirs(self, paths: Sequence[str], *, owner: str | None = None, fresh: bool = False) -> None:
        """Under the sandbox root, never the host's own paths; ``owner`` is ignored (no root here)."""
        for path in paths:
            target = self.host_path(path)
            if fresh and target != self.root.resolve():
                await asyncio.to_thread(shutil.rmtree, target, True)
            target.mkdir(parents=True, exist_ok=True)

    async def end_processes(self, agent_user: str | None) -> None:
        """Kill the process groups its commands started; one that left its group escapes (no namespaces)."""
        for session in self.sessions:
            _kill_group(session)

    async def health(self) -> SandboxHealth:
        alive = self.root.is_dir()
        return SandboxHealth(alive, detail="" if alive else "sandbox directory was removed")

    async def _remove(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.root, True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes | None) -> str:
    return (data or b"")[-OUTPUT_LIMIT:].decode("utf-8", errors="replace")
