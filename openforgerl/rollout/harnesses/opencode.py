"""``opencode``: ``opencode run`` with the proxy as an OpenAI-compatible provider (Chat Completions).

The whole config travels in ``OPENCODE_CONFIG_CONTENT``: one provider ``forge`` (package
``@ai-sdk/openai-compatible``, which opencode bundles) serving ``ctx.model``, every permission
allowed, sharing and autoupdate off. ``--title`` names the session so opencode makes no separate
title call. Invariant: no model catalogue fetch, no plugin or LSP download, no external plugins.
"""

from __future__ import annotations

from typing import Any

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import PROVIDER, openai_base, quiet_env, to_json


class OpencodeHarness(Harness):
    """opencode, non-interactive (``opencode run --format json``)."""

    class Options(HarnessOptions):
        agent: str = "build"
        """The opencode agent that runs the instruction (build: the one that edits and runs commands)."""

    name = "opencode"
    memory_mb = 704  # its own peak on the hello task: 526 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("npm", "opencode-ai@1.18.33", "opencode")
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        argv = [self.launcher(), "run", "--pure", "--auto", "--format", "json", "--title", "forge",
                "--dir", ctx.workdir, "--model", f"{PROVIDER}/{ctx.model}",
                "--agent", self.options.agent, ctx.instruction]
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
