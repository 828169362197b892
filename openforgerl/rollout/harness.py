"""A harness adapter says how one agent CLI runs one instruction headless in a sandbox.

A harness is defined once, by its class: ``name``, the ``package`` its CLI installs from (the
install catalog and the image layer derive from it), its typed ``Options``, and ``invocation``
(argv, env, config files) plus an optional ``prepare``. The framework-owned ``run`` writes the
files, isolates HOME, and executes with the agent timeout.
Invariants: the harness reaches a model only through ``ctx.base_url`` with ``ctx.api_key`` (the
proxy and the rollout's token), so every call it makes is recorded into its rollout; and an option
the harness does not declare, or a value of the wrong type, fails before anything runs.
"""

from __future__ import annotations

import tempfile
import types
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal, Self, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from openforgerl.errors import ConfigError, UserError
from openforgerl.rollout.runtime import ExecResult, Sandbox
from openforgerl.tasks import Task

TOOLS_MOUNT = "/opt/forge/tools"
"""Where a harness's tools dir lives inside the harness image layer."""
COMPILE_CACHE = ".compile-cache"
"""Where in an installed harness's directory its Node compile cache lives (``HarnessPackage.compile_cache``)."""


def compile_cache_env(cache_dir: str) -> dict[str, str]:
    """Node reads (and, where it may, writes) its compile cache at ``cache_dir``.

    Portable: entries are keyed by module paths relative to the cache, so a cache made at install in the
    host's tools dir is valid at ``TOOLS_MOUNT`` in every harness layer.
    """
    return {"NODE_COMPILE_CACHE": cache_dir, "NODE_COMPILE_CACHE_PORTABLE": "1"}


@dataclass(frozen=True)
class HarnessPackage:
    """Where a harness CLI comes from and how it is started (one per harness, on its class)."""

    kind: Literal["npm", "pip"]
    package: str
    """Pinned package spec (npm ``name@version`` or pip ``name==version``)."""
    bin: str
    """The launcher's name (the command a user would type)."""
    module: str | None = None
    """pip: the module run as ``python3 -m MODULE``."""
    extra_files: tuple[str, ...] = ()
    """pip: ``module:file name`` of our own agents, copied next to the installed libraries."""
    check_args: tuple[str, ...] = ("--version",)
    """Arguments of a quick offline smoke run that must exit 0."""
    compile_cache: bool = False
    """npm: the install runs one turn of the CLI against a stand-in model (offline) and ships the Node compile
    cache it leaves, so a rollout's CLI starts without compiling its modules again (for a CLI whose start-up is
    mostly module loading: OpenClaw's hello rollout takes 27 s instead of 33, ``bench/harness_startup.py``)."""


class HarnessOptions(BaseModel):
    """A harness's settings from the run config (``harness_options``); subclasses declare the fields.

    Unknown keys are refused: a typo would otherwise produce a whole run under the wrong settings.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def parse(cls, harness: str, options: Mapping[str, Any]) -> Self:
        """``options`` validated, or a one-line ``ConfigError`` naming the first bad field."""
        unknown = sorted(set(options) - set(cls.model_fields))
        if unknown:
            noun = "not an option" if len(unknown) == 1 else "not options"
            raise ConfigError(f"{', '.join(f'harness_options.{key}' for key in unknown)}: {noun} of harness {harness}",
                              fix=cls._valid_keys(harness))
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise cls._type_error(harness, exc) from None

    @classmethod
    def _valid_keys(cls, harness: str) -> str:
        if not cls.model_fields:
            return f"harness {harness} takes no options; remove harness_options"
        return f"use one of: {', '.join(sorted(cls.model_fields))}"

    @classmethod
    def _type_error(cls, harness: str, exc: ValidationError) -> ConfigError:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        field = cls.model_fields.get(str(error["loc"][0])) if error["loc"] else None
        expected = type_name(field.annotation) if field else "a valid value"
        # A type mismatch is said by the expected type; a broken constraint (range, pattern) needs pydantic's words.
        plain = error["type"].endswith(("_type", "_parsing")) or error["type"] in ("literal_error", "int_from_float")
        detail = "" if plain else f" ({error['msg'][0].lower()}{error['msg'][1:]})"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        return ConfigError(f"harness_options.{key}: expected {expected}, got {error['input']!r}{detail}{more}",
                           fix=f"give {key} {expected}, or leave it out for harness {harness}'s default")


READABLE_TYPES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def type_name(annotation: Any) -> str:
    """``an integer``, ``one of 'a', 'b'``: an annotation as a config's author reads it (None is "unset")."""
    origin = get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(value) for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in get_args(annotation) if arg is not type(None))
    return READABLE_TYPES.get(annotation, getattr(annotation, "__name__", str(annotation)))


@dataclass(frozen=True)
class AgentContext:
    """Everything a harness needs for one rollout (its settings live on the harness: ``Harness.options``)."""

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


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Absolute sandbox path -> text, written before the run (config files, instruction)."""


class Harness(ABC):
    name: ClassVar[str] = "harness"
    package: ClassVar[HarnessPackage | None] = None
    """Where its CLI installs from (None: it runs what the task image has)."""
    uses_model: ClassVar[bool] = True
    """False for harnesses that call no model (nop, oracle): their rollouts need no proxy."""
    Options: ClassVar[type[HarnessOptions]] = HarnessOptions
    """Its settings; adapters that take any declare a nested ``class Options(HarnessOptions)``."""
    memory_mb: int | None = None
    """The memory its own processes need on a small task, with margin (``bench/harness_memory.py`` measures
    it). A sandbox whose ``memory_mb`` holds this much and still OOM-kills the harness lost that memory to the
    agent's work (a command of its own that ran the harness out, or raised the harness's ``oom_score_adj`` so
    the kernel picked it): a policy failure, verified as usual. Below it, or unknown, the task's memory cannot
    hold the harness: an infra error."""

    def __init__(self, **options: Any) -> None:
        self.options = self.Options.parse(self.name, options)

    @property
    def tool(self) -> str | None:
        """Install catalog entry whose files the harness image layer carries (None: nothing)."""
        return self.name if self.package else None

    @abstractmethod
    def invocation(self, ctx: AgentContext) -> Invocation:
        """The command line, environment and files that run ``ctx.instruction`` headless."""

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        """Hook: copy what this harness needs from the task into the sandbox."""

    def launcher(self) -> str:
        """Its CLI's launcher as the harness image layer holds it."""
        if self.package is None:
            raise UserError(f"harness {self.name} has no package, so no launcher",
                            fix="declare package = HarnessPackage(...) on its class")
        return f"{TOOLS_MOUNT}/bin/{self.package.bin}"

    def compile_cache_env(self) -> dict[str, str]:
        """The environment that points its Node at the compile cache its layer carries (none: {}).

        The layer's cache is root's and read-only to a non-root agent; a rollout's own writes (a root agent's)
        stay in its own container, so no rollout can change what a later one loads.
        """
        if self.package is None or not self.package.compile_cache:
            return {}
        return compile_cache_env(f"{TOOLS_MOUNT}/{self.name}/{COMPILE_CACHE}")

    async def run(self, sandbox: Sandbox, task: Task, ctx: AgentContext) -> ExecResult:
        await self.prepare(sandbox, task)
        invocation = self.invocation(ctx)
        own_dirs = [ctx.home, ctx.logs_dir, ctx.workdir]
        await sandbox.make_dirs(own_dirs)
        await write_files(sandbox, invocation.files, ctx.user)
        if ctx.user:  # after writing, so directories the files created (e.g. ~/.codex) are the agent's too
            await sandbox.make_dirs(own_dirs, owner=ctx.user)
        env = {"HOME": ctx.home, **self.compile_cache_env(), **invocation.env}
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
