"""Where openforgerl keeps things: a cache it can rebuild, and data it must never lose.

The **home** (``OPENFORGERL_HOME``, else ``$XDG_CACHE_HOME/openforgerl`` or ``~/.cache/openforgerl``)
holds what can be made again: converted models, harness CLIs, the base image's rootfs, service
state. Deleting it costs time, never a recorded rollout.
The **data dir** holds what runs record and nothing can remake (the standalone proxy's rollout
logs): ``OPENFORGERL_DATA``, else ``$OPENFORGERL_HOME/data`` when a home is set explicitly, else
``$XDG_DATA_HOME/openforgerl`` or ``~/.local/share/openforgerl``. A ``forge rollout`` run keeps its
own records in its run directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def forge_home() -> Path:
    env = os.environ.get("OPENFORGERL_HOME")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "openforgerl"


def data_dir() -> Path:
    """Recorded data (never a cache): see the module docstring for the order of precedence."""
    if os.environ.get("OPENFORGERL_DATA"):
        return Path(os.environ["OPENFORGERL_DATA"]).expanduser()
    if os.environ.get("OPENFORGERL_HOME"):
        return forge_home() / "data"
    share = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(share) / "openforgerl"


def models_dir() -> Path:
    return forge_home() / "models"


def tools_dir() -> Path:
    """Harness CLIs (npm prefixes, pip venvs) live here, one directory per harness."""
    return forge_home() / "tools"


def state_dir() -> Path:
    """Pid files and logs of the services ``forge`` starts (dockerd, registry, vLLM)."""
    return forge_home() / "state"
