"""Every error openforgerl raises on purpose, and nothing else.

Each error carries what failed and, where the user can act, how to fix it; the CLI prints it on
one line as ``Type: what failed; fix: how``. A failed rollout is *data* (a recorded status), not
one of these.

    ForgeError
     ├── UserError              bad input: a config, a task directory, a name, a flag
     │    ├── ConfigError        a config file or a dotted override is invalid
     │    ├── TaskFormatError    a task directory does not load (carries every problem)
     │    └── UnknownNameError   a model/harness/plugin name nobody registered
     ├── StackError             a part of the local stack cannot be made ready
     │    └── DockerError        the Docker engine is missing, down, or refuses us
     ├── ResourceError          the machine lacks something: disk space, a free port, memory
     ├── ProviderError          the inference engine (vLLM, ...) failed or is unreachable
     ├── EnvBuildError          building or validating a task environment failed
     ├── SandboxError           a rollout container/process could not be run
     ├── VerifierError          a verifier crashed (not: a verifier said "failed")
     └── ProxyError             the recording proxy could not serve or record
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator


class ForgeError(Exception):
    """Base class: ``what`` failed; ``fix`` says what the user can do about it."""

    def __init__(self, what: str, *, fix: str | None = None) -> None:
        self.what = what
        self.fix = fix
        super().__init__(what)

    def __str__(self) -> str:
        return f"{self.what}; fix: {self.fix}" if self.fix else self.what


class UserError(ForgeError):
    """Bad input from the user; the message says how to fix it."""


class ConfigError(UserError):
    """A config file or an override is invalid."""


class TaskFormatError(UserError):
    """A task directory does not load. ``problems`` lists every one, not just the first."""

    def __init__(self, what: str, problems: list[str], *, fix: str | None = None) -> None:
        self.problems = problems
        super().__init__(what, fix=fix)

    def __str__(self) -> str:
        return "\n".join([self.what, *("  " + p for p in self.problems)])


class UnknownNameError(UserError):
    """A name that no table or plugin knows; the message lists the known names."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(
            f"unknown {kind} {name!r}",
            fix=f"use one of: {', '.join(self.known) or '(none registered)'}",
        )


class StackError(ForgeError):
    """A part of the local stack cannot be made ready."""


class DockerError(StackError):
    """The Docker engine is missing, not running, or refuses this user."""


class ResourceError(ForgeError):
    """The machine lacks something the command needs (disk, port, memory)."""


class ProviderError(ForgeError):
    """The inference engine failed or cannot be reached."""


class EnvBuildError(ForgeError):
    """Building or validating a task environment failed."""


class SandboxError(ForgeError):
    """A rollout container or process could not be started, reached or stopped."""


class VerifierError(ForgeError):
    """A verifier crashed or produced no reward (as opposed to judging a failure)."""


class ProxyError(ForgeError):
    """The recording proxy could not serve or record a call."""


@contextlib.contextmanager
def map_os_errors(doing: str) -> Iterator[None]:
    """Turn the OS errors a user can act on into ``ResourceError`` naming what we were doing."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ResourceError(
                f"no space left on device while {doing}",
                fix="free disk space (df -h) or point OPENFORGERL_HOME at a larger disk, then rerun",
            ) from exc
        if exc.errno == errno.EROFS:
            raise ResourceError(f"read-only filesystem while {doing}: {exc.filename or exc}",
                                fix="choose a directory on a writable filesystem") from exc
        if exc.errno == errno.EDQUOT:
            raise ResourceError(f"disk quota exceeded while {doing}",
                                fix="free space under your quota or choose another directory") from exc
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ResourceError(
                f"permission denied while {doing}: {exc.filename or exc}",
                fix="run as a user who may write there, or choose another directory",
            ) from exc
        raise
