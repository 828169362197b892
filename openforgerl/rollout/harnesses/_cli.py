"""What the adapters that run a CLI in the sandbox share (react and browser, codex, claude-code, ...).

Invariant: every real CLI gets the same quiet environment — no telemetry, no update checks, no
version pings — so a rollout's only network traffic is its model calls to the proxy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from openforgerl.rollout.harness import AgentContext, HarnessOptions

QUIET_ENV: dict[str, str] = {
    "DO_NOT_TRACK": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
    "DISABLE_AUTOUPDATER": "1",
    "NO_COLOR": "1",
}
"""Opt-outs honoured across the npm/Node and Python CLI ecosystems (each adapter adds its own)."""

PROVIDER = "forge"
"""The provider name each CLI's config gives the proxy."""


def openai_base(ctx: AgentContext) -> str:
    """The proxy's OpenAI-style API root (Chat Completions and Responses live under it)."""
    return f"{ctx.base_url}/v1"


def flag_args(options: HarnessOptions, keys: Iterable[str]) -> list[str]:
    """``--max-turns 5`` for each of ``keys`` that is set; unset ones leave the CLI its own default."""
    args: list[str] = []
    for key in keys:
        value = getattr(options, key)
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def quiet_env(**extra: str) -> dict[str, str]:
    return {**QUIET_ENV, **extra}


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
