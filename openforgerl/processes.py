"""Questions about processes of this machine that several layers ask (is a recorded owner still alive?)."""

from __future__ import annotations

import os
from pathlib import Path


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as dead (and is reaped if it is our child)."""
    if pid <= 0:  # waitpid(0 or -n) would reap some *other* child
        return False
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    # The state letter follows the ")" closing the command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[0] != "Z"


OPEN_FILES_CAP = 1 << 20
"""The most open files ``raise_open_files_limit`` asks for (a hard limit of "unlimited" is not a number to set)."""


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit (children inherit it); the soft limit now.

    Each rollout in flight holds file descriptors in whatever serves it: the harness's connection to the proxy,
    the proxy's to the engine, the rollout's open log, the runtime's sockets to Docker or Kubernetes. A login
    shell's soft limit is often 1024 (the hard one 65536 or more), which a few hundred rollouts at once use up:
    the proxy then cannot accept a harness (it sees a closed connection) or create a log. Raising the soft limit
    needs no privilege."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_CAP)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # a sandbox that forbids it: keep what there is
            pass
    return OPEN_FILES_CAP if soft == resource.RLIM_INFINITY else soft


def open_files_limit() -> int:
    """This process's soft limit of open files."""
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
