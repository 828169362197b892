"""Debian packages the local stack installs for itself (docker.io, docker-registry, debootstrap).

Invariant: only root installs anything; anyone else gets a StackError with the exact
``sudo apt-get install`` line to run, and a failed apt step is reported with its output.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from openforgerl.errors import StackError


def is_root() -> bool:
    return os.geteuid() == 0


_apt_updated = False


def apt_install(packages: Sequence[str]) -> None:
    """``apt-get install`` Debian packages (root only); failures become a StackError with the output."""
    global _apt_updated
    if not is_root():
        raise StackError(f"{', '.join(packages)} not installed and forge is not root",
                         fix=f"run: sudo apt-get install -y {' '.join(packages)}  (or rerun as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [] if _apt_updated else [["apt-get", "update"]]
    steps.append(["apt-get", "install", "-y", "--no-install-recommends", *packages])
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-4:])
            raise StackError(f"{' '.join(step)} failed (exit {out.returncode}): {tail}",
                             fix="check the apt sources and network, then rerun forge stack up")
    _apt_updated = True
