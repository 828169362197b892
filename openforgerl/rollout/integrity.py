"""The integrity guard: what an agent may not have changed when its verifier runs.

A verifier runs programs of the image (bash, python3, the dynamic loader and the libraries they
load) as root. An agent that rewrote any of them could write its own reward. Before the verifier
runs, the sandbox's changes since it started are read from outside it (``Sandbox.changes``), and
any change under ``SYSTEM_PATHS``, or to a Python site/dist-packages directory anywhere, that the
task did not declare writable (``[agent] writable_paths``) ends the rollout as a policy failure with
reward 0 and the paths recorded as ``tampered``.

Invariant: the guard is decided from the outside view alone; nothing it runs lives in the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

SYSTEM_PATHS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.cache",
    "/etc/profile", "/etc/profile.d", "/etc/environment", "/etc/bash.bashrc", "/etc/python3",
    "/root/.local/lib", "/opt/forge",
)
"""Programs, libraries and start-up files the verifier (root, bash, python3) reads."""
SITE_DIRS = ("site-packages", "dist-packages")
AGENT_SCRATCH = ("/tmp", "/var/tmp")
"""Where harnesses keep their own files (HOME, caches); nothing the verifier runs comes from here."""


def guarded_roots() -> list[str]:
    """Where changes can matter: the system paths plus anywhere a site directory may sit."""
    return [*SYSTEM_PATHS, "/opt", "/root", "/home", "/srv", "/var/lib"]


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == prefix or path.startswith(prefix.rstrip("/") + "/") for prefix in prefixes)


def is_guarded(path: str) -> bool:
    """Whether a change at ``path`` could change what the verifier runs."""
    return _under(path, SYSTEM_PATHS) or any(part in SITE_DIRS for part in PurePosixPath(path).parts)


def tampered(changed: Iterable[str], writable: Iterable[str], workdir: str) -> list[str]:
    """The changed paths the agent was not allowed to change, sorted (empty: the guard passes).

    Allowed: the task's declared writable paths, the agent's workdir and the scratch dirs."""
    allowed = [*writable, workdir, *AGENT_SCRATCH]
    return sorted({path for path in changed if is_guarded(path) and not _under(path, allowed)})
