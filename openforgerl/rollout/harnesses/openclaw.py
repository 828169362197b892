"""``openclaw``: ``openclaw agent exec`` (one headless embedded turn, no Gateway) pinned to a config file.

The config registers the proxy as the only model provider (``models.mode = "replace"``); its
``api`` picks the wire — ``openai-completions`` (default), ``openai-responses`` or
``anthropic-messages``. Invariant: the run reads only that pinned config and a state dir under
the isolated HOME, with update checks, telemetry and LAN discovery off.
"""

from __future__ import annotations

from typing import Any

from openforgerl.errors import UserError
from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.harnesses._cli import PROVIDER, merged_options, openai_base, quiet_env, to_json

OWN_DEADLINE_SLACK_S = 30
"""OpenClaw's own deadline trails the agent timeout, so a slow run ends as ``agent_timeout`` (killed by
the framework) rather than as OpenClaw's exit 2, which would read as a policy failure."""
WIRES = {"openai-completions", "openai-responses", "anthropic-messages"}


class OpenclawHarness(Harness):
    """Options: api (openai-completions|openai-responses|anthropic-messages), lean (reduced tool surface)."""

    name = "openclaw"
    tool = "openclaw"

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = merged_options(self, ctx)
        config_path = f"{ctx.home}/openclaw.json"  # in HOME itself: a non-root agent owns it, not new subdirs
        argv = [self.launcher("openclaw"), "agent", "exec", "--config", config_path, "--cwd", ctx.workdir,
                "--model", f"{PROVIDER}/{ctx.model}", "--json",
                "--timeout", str(int(ctx.timeout_sec) + OWN_DEADLINE_SLACK_S)]
        if options.get("lean"):
            argv.append("--local-model-lean")
        argv.append(ctx.instruction)
        env = quiet_env(OPENCLAW_HOME=ctx.home, OPENCLAW_STATE_DIR=f"{ctx.home}/.openclaw",
                        OPENCLAW_NO_AUTO_UPDATE="1", OPENCLAW_DISABLE_BONJOUR="1", OPENCLAW_NO_RESPAWN="1")
        return Invocation(argv, env, {config_path: to_json(config(ctx, str(options.get("api", "openai-completions"))))})


def config(ctx: AgentContext, api: str) -> dict[str, Any]:
    """openclaw.json: the proxy as the only provider serving ``ctx.model``; no updates, no telemetry."""
    if api not in WIRES:
        raise UserError(f"openclaw api {api!r} is not one the proxy speaks", fix=f"use one of {sorted(WIRES)}")
    base_url = ctx.base_url if api == "anthropic-messages" else openai_base(ctx)
    model = {"id": ctx.model, "name": ctx.model, "reasoning": False, "input": ["text"],
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}
    provider = {"baseUrl": base_url, "apiKey": ctx.api_key, "api": api, "models": [model]}
    return {"models": {"mode": "replace", "providers": {PROVIDER: provider}},
            "update": {"checkOnStart": False, "auto": {"enabled": False}},
            "telemetry": {"enabled": False}}
