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
