"""Harness adapters: how each real agent CLI is installed, pointed at the proxy, and run headless.

Built-ins are a short-name -> dotted-path table; third parties register more under the entry-point
group ``openforgerl.harnesses``. An unknown name lists the known ones.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from openforgerl.errors import UnknownNameError
from openforgerl.rollout.harness import Harness

BUILTIN_HARNESSES: dict[str, str] = {
    "react": "openforgerl.rollout.harnesses.react:ReactHarness",
    "browser": "openforgerl.rollout.harnesses.browser:BrowserHarness",
    "nop": "openforgerl.rollout.harnesses.baseline:NopHarness",
    "oracle": "openforgerl.rollout.harnesses.baseline:OracleHarness",
    "codex": "openforgerl.rollout.harnesses.codex:CodexHarness",
    "opencode": "openforgerl.rollout.harnesses.opencode:OpencodeHarness",
    "claude-code": "openforgerl.rollout.harnesses.claude_code:ClaudeCodeHarness",
    "openclaw": "openforgerl.rollout.harnesses.openclaw:OpenclawHarness",
    "mini-swe-agent": "openforgerl.rollout.harnesses.mini_swe_agent:MiniSweAgentHarness",
}


def harness_class(name: str) -> type[Harness]:
    if name in BUILTIN_HARNESSES:
        module, _, attr = BUILTIN_HARNESSES[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    plugins = {ep.name: ep for ep in entry_points(group="openforgerl.harnesses")}
    if name in plugins:
        return plugins[name].load()
    raise UnknownNameError("harness", name, [*BUILTIN_HARNESSES, *plugins])


def make_harness(name: str, **options: Any) -> Harness:
    return harness_class(name)(**options)
