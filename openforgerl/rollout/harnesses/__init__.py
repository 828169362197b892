"""Harness adapters: how each real agent CLI is installed, pointed at the proxy, and run headless.

``HARNESSES`` names them: built-ins are a short-name -> dotted-path table, and third parties add
more under the entry-point group ``openforgerl.harnesses``. Everything else about a harness (its
package, launcher, options) is read from its class, so the CLI listings, the install catalog and
option checks all follow this one table.
Invariant: an unknown harness name, or an option its class does not declare, is refused before a
rollout starts, with the valid names listed.
"""

from __future__ import annotations

from typing import Any

from openforgerl.plugins import NameTable
from openforgerl.rollout.harness import Harness

HARNESSES: NameTable[type[Harness]] = NameTable("harness", {
    "react": "openforgerl.rollout.harnesses.react:ReactHarness",
    "browser": "openforgerl.rollout.harnesses.browser:BrowserHarness",
    "nop": "openforgerl.rollout.harnesses.baseline:NopHarness",
    "oracle": "openforgerl.rollout.harnesses.baseline:OracleHarness",
    "codex": "openforgerl.rollout.harnesses.codex:CodexHarness",
    "opencode": "openforgerl.rollout.harnesses.opencode:OpencodeHarness",
    "claude-code": "openforgerl.rollout.harnesses.claude_code:ClaudeCodeHarness",
    "openclaw": "openforgerl.rollout.harnesses.openclaw:OpenclawHarness",
    "mini-swe-agent": "openforgerl.rollout.harnesses.mini_swe_agent:MiniSweAgentHarness",
}, "openforgerl.harnesses")


def harness_class(name: str) -> type[Harness]:
    return HARNESSES.load(name)


def make_harness(name: str, **options: Any) -> Harness:
    """The harness ``name`` with ``options`` validated (ConfigError on an unknown or mistyped one)."""
    return harness_class(name)(**options)


def validate_harness_options(name: str, options: dict[str, Any]) -> None:
    """Check a run config's ``harness_options`` against harness ``name``'s Options, without building it."""
    harness_class(name).Options.parse(name, options)
