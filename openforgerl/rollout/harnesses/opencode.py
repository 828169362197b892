"""``opencode``: ``opencode run`` with the proxy as an OpenAI-compatible provider (Chat Completions).

The whole config travels in ``OPENCODE_CONFIG_CONTENT``: one provider ``forge`` (package
``@ai-sdk/openai-compatible``, which opencode bundles) serving ``ctx.model``, every permission
allowed, sharing and autoupdate off. ``--title`` names the session so opencode makes no separate
title call. Invariant: no model catalogue fetch, no plugin or LSP download, no external plugins.
"""

from __future__ import annotations

from typing import Any

from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.harnesses._cli import PROVIDER, merged_options, openai_base, quiet_env, to_json


class OpencodeHarness(Harness):
    """Options: agent (opencode agent, default build)."""

    name = "opencode"
    tool = "opencode"

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = merged_options(self, ctx)
        argv = [self.launcher("opencode"), "run", "--pure", "--auto", "--format", "json", "--title", "forge",
                "--dir", ctx.workdir, "--model", f"{PROVIDER}/{ctx.model}",
                "--agent", str(options.get("agent", "build")), ctx.instruction]
        env = quiet_env(
            OPENCODE_CONFIG_CONTENT=to_json(config(ctx)),
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_SHARE="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
            OPENCODE_DISABLE_CLAUDE_CODE="1",
            OPENCODE_DISABLE_EXTERNAL_SKILLS="1",
            OPENCODE_DISABLE_PROJECT_CONFIG="1",
        )
        return Invocation(argv, env)


def config(ctx: AgentContext) -> dict[str, Any]:
    """opencode.json: the proxy as the only provider, nothing asked, nothing shared."""
    provider = {"npm": "@ai-sdk/openai-compatible", "name": "openforgerl proxy",
                "options": {"baseURL": openai_base(ctx), "apiKey": ctx.api_key},
                "models": {ctx.model: {"name": ctx.model, "tool_call": True}}}
    return {"provider": {PROVIDER: provider},
            "model": f"{PROVIDER}/{ctx.model}", "small_model": f"{PROVIDER}/{ctx.model}",
            "enabled_providers": [PROVIDER], "autoupdate": False, "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "allow"}}
