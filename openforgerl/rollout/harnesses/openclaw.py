"""``openclaw``: ``openclaw agent exec`` (one headless embedded turn, no Gateway) pinned to a config file.

The config registers the proxy as the only model provider (``models.mode = "replace"``); its
``api`` picks the wire — ``openai-completions`` (default), ``openai-responses`` or
``anthropic-messages``. Invariant: the run reads only that pinned config and a state dir under
the isolated HOME, with update checks, telemetry and LAN discovery off. Its start-up is mostly loading
ES modules, so its install ships a Node compile cache (``HarnessPackage.compile_cache``).
"""

from __future__ import annotations

from typing import Any, Literal

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import PROVIDER, openai_base, quiet_env, to_json

OWN_DEADLINE_SLACK_S = 30
"""OpenClaw's own deadline trails the agent timeout, so a slow run ends as ``agent_timeout`` (killed by
the framework) rather than as OpenClaw's exit 2, which would read as a policy failure."""
Wire = Literal["openai-completions", "openai-responses", "anthropic-messages"]
"""The wires the proxy speaks that OpenClaw can use."""


class OpenclawHarness(Harness):
    """OpenClaw's embedded agent, one headless turn (``openclaw agent exec``)."""

    class Options(HarnessOptions):
        api: Wire = "openai-completions"
        """The wire OpenClaw talks to the proxy."""
        lean: bool = False
        """Ask for OpenClaw's reduced tool surface for local models (``--local-model-lean``)."""

    name = "openclaw"
    memory_mb = 1088  # its own peak on the hello task: 858 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("npm", "openclaw@2026.9.6", "openclaw", compile_cache=True)
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        config_path = f"{ctx.home}/openclaw.json"  # in HOME itself: a non-root agent owns it, not new subdirs
        argv = [self.launcher(), "agent", "exec", "--config", config_path, "--cwd", ctx.workdir,
                "--model", f"{PROVIDER}/{ctx.model}", "--json",
                "--timeout", str(int(ctx.timeout_sec) + OWN_DEADLINE_SLACK_S)]
        if self.options.lean:
            argv.append("--local-model-lean")
        argv.append(ctx.instruction)
        env = quiet_env(OPENCLAW_HOME=ctx.home, OPENCLAW_STATE_DIR=f"{ctx.home}/.openclaw",
                        OPENCLAW_NO_AUTO_UPDATE="1", OPENCLAW_DISABLE_BONJOUR="1", OPENCLAW_NO_RESPAWN="1",
                        # It would respawn itself to move Node's compile cache (the layer's, which the framework
                        # names) under a per-version directory of its own, empty in every fresh sandbox.
                        OPENCLAW_PACKAGED_COMPILE_CACHE_RESPAWNED="1")
        return Invocation(argv, env, {config_path: to_json(config(ctx, self.options.api))})


def config(ctx: AgentContext, api: Wire) -> dict[str, Any]:
    """openclaw.json: the proxy as the only provider serving ``ctx.model``; no updates, no telemetry."""
    base_url = ctx.base_url if api == "anthropic-messages" else openai_base(ctx)
    model = {"id": ctx.model, "name": ctx.model, "reasoning": False, "input": ["text"],
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}
    provider = {"baseUrl": base_url, "apiKey": ctx.api_key, "api": api, "models": [model]}
    return {"models": {"mode": "replace", "providers": {PROVIDER: provider}},
            "update": {"checkOnStart": False, "auto": {"enabled": False}},
            "telemetry": {"enabled": False}}
