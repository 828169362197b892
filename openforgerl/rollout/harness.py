"""A harness adapter says how one agent CLI runs one instruction headless in a sandbox.

Adapters override ``invocation`` (argv, env, config files) and optionally ``prepare``; the
framework-owned ``run`` writes the files, isolates HOME, and executes with the agent timeout.
Invariant: the harness reaches a model only through ``ctx.base_url`` with ``ctx.api_key`` (the
proxy and the rollout's token), so every call it makes is recorded into its rollout.
"""

from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from openforgerl.rollout.runtime import ExecResult, Sandbox
from openforgerl.tasks import Task

TOOLS_MOUNT = "/opt/forge/tools"
"""Where a harness's tools dir lives inside the harness image layer."""


@dataclass(frozen=True)
class AgentContext:
    """Everything a harness needs for one rollout."""

    instruction: str
    base_url: str
    """Proxy root as seen from inside the sandbox, without /v1 (e.g. http://127.0.0.1:8321)."""
    api_key: str
    """The rollout's token."""
    model: str
    workdir: str = "/app"
    timeout_sec: float = 600.0
    home: str = "/tmp/forge-home"
    logs_dir: str = "/logs/agent"
    user: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """Harness-specific settings from the run config (e.g. tool_choice for small models)."""


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Absolute sandbox path -> text, written before the run (config files, instruction)."""


class Harness(ABC):
    name: ClassVar[str] = "harness"
    tool: ClassVar[str | None] = None
    """Entry of the install catalog whose files the harness image layer carries (None: nothing)."""
    uses_model: ClassVar[bool] = True
    """False for harnesses that call no model (nop, oracle): their rollouts need no proxy."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    @abstractmethod
    def invocation(self, ctx: AgentContext) -> Invocation:
        """The command line, environment and files that run ``ctx.instruction`` headless."""

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        """Hook: copy what this harness needs from the task into the sandbox."""

    def launcher(self, bin_name: str) -> str:
        return f"{TOOLS_MOUNT}/bin/{bin_name}"

    async def run(self, sandbox: Sandbox, task: Task, ctx: AgentContext) -> ExecResult:
        await self.prepare(sandbox, task)
        invocation = self.invocation(ctx)
        own_dirs = [ctx.home, ctx.logs_dir, ctx.workdir]
        await sandbox.make_dirs(own_dirs)
        await write_files(sandbox, invocation.files, ctx.user)
        if ctx.user:  # after writing, so directories the files created (e.g. ~/.codex) are the agent's too
            await sandbox.make_dirs(own_dirs, owner=ctx.user)
        env = {"HOME": ctx.home, **invocation.env}
        return await sandbox.exec(invocation.argv, timeout=ctx.timeout_sec, env=env, cwd=ctx.workdir, user=ctx.user)


async def write_files(sandbox: Sandbox, files: dict[str, str], owner: str | None = None) -> None:
    """Write text files at absolute sandbox paths (parents created)."""
    for path, text in files.items():
        target = PurePosixPath(path)
        with tempfile.TemporaryDirectory(prefix="forge-file-") as tmp:
            local = Path(tmp) / target.name
            local.write_text(text)
            await sandbox.put(local, str(target.parent))
        if owner:
            await sandbox.exec(["chown", owner, str(target)], user="0")
