"""``codex``: ``codex exec`` with the proxy as a custom model provider (OpenAI Responses, SSE).

Codex ignores ``OPENAI_BASE_URL`` and speaks only Responses to custom providers, so the provider
lives in ``$CODEX_HOME/config.toml`` (``wire_api = "responses"``) and its key in ``FORGE_API_KEY``.
Invariant: approvals and the sandbox are off (the container is the sandbox), and so are update
checks, analytics, feedback upload and web search: nothing but model calls leaves the process.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import PROVIDER, openai_base, quiet_env

KEY_ENV = "FORGE_API_KEY"


class CodexHarness(Harness):
    """OpenAI's Codex CLI, non-interactive (``codex exec --json``)."""

    class Options(HarnessOptions):
        reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
        """Reasoning effort Codex asks for (unset: Codex sends none)."""
        context_window: int | None = Field(None, ge=1)
        """The policy's context window in tokens: Codex knows no metadata for our model names and
        otherwise assumes a default."""

    name = "codex"
    memory_mb = 64  # its own peak on the hello task: 27 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("npm", "@openai/codex@0.171.0", "codex")
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        argv = [self.launcher(), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "--json", "--cd", ctx.workdir, "--model", ctx.model, ctx.instruction]
        # CODEX_HOME is HOME itself: a non-root agent owns it (a subdirectory we created would be root's).
        # Codex puts its helper commands (apply_patch, ...) on PATH only when CODEX_HOME is outside the
        # temp dir, so TMPDIR moves to /var/tmp (also world-writable, and outside HOME).
        env = quiet_env(CODEX_HOME=ctx.home, TMPDIR="/var/tmp", **{KEY_ENV: ctx.api_key})
        return Invocation(argv, env, {f"{ctx.home}/config.toml": config_toml(ctx, self.options)})


def config_toml(ctx: AgentContext, options: CodexHarness.Options) -> str:
    """config.toml: the proxy as the only provider; no approvals, sandbox, updates or analytics."""
    settings: dict[str, Any] = {"model": ctx.model, "model_provider": PROVIDER, "approval_policy": "never",
                "sandbox_mode": "danger-full-access", "check_for_update_on_startup": False,
                "web_search": "disabled", "hide_agent_reasoning": False}
    if options.reasoning_effort is not None:
        settings["model_reasoning_effort"] = options.reasoning_effort
    if options.context_window is not None:
        settings["model_context_window"] = options.context_window
    provider = {"name": "openforgerl proxy", "base_url": openai_base(ctx), "env_key": KEY_ENV,
                "wire_api": "responses", "request_max_retries": 0, "stream_max_retries": 0}
    lines = [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false", "",
              f"[model_providers.{PROVIDER}]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in provider.items()]
    return "\n".join(lines) + "\n"


def toml_value(value: object) -> str:
    """A TOML scalar (JSON strings are valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)
