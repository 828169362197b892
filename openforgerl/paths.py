"""Where openforgerl keeps what it downloads and makes: one home directory, reused across runs.

``OPENFORGERL_HOME`` wins; otherwise ``$XDG_CACHE_HOME/openforgerl`` or ``~/.cache/openforgerl``.
Everything under it is a cache: deleting it costs time, never data a run recorded.
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


def models_dir() -> Path:
    return forge_home() / "models"


def tools_dir() -> Path:
    """Harness CLIs (npm prefixes, pip venvs) live here, one directory per harness."""
    return forge_home() / "tools"


def state_dir() -> Path:
    """Pid files and logs of the services ``forge`` starts (dockerd, registry, vLLM)."""
    return forge_home() / "state"
