"""``claude-code``: ``claude -p`` against the proxy's Anthropic Messages endpoint (SSE).

Pointed there by ``ANTHROPIC_BASE_URL`` (the proxy root; Claude Code appends ``/v1/messages``)
with the rollout token as ``ANTHROPIC_API_KEY``; every model alias (the small/fast one used for
side calls included) resolves to ``ctx.model``. Permissions are skipped — the container is the
sandbox — which Claude Code allows as root only with ``IS_SANDBOX=1``.
Invariant: non-essential traffic (telemetry, error reports, update checks) is off.
"""

from __future__ import annotations

from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.harnesses._cli import merged_options, quiet_env


class ClaudeCodeHarness(Harness):
    """Options: max_turns (agentic turns before it stops), allowed_tools (instead of skipping permissions),
    tools (the built-in tools offered, e.g. "Write,Bash"), system_prompt (replaces the default one).
    The last two shrink its ~12k-token prompt for small-context policies."""

    name = "claude-code"
    tool = "claude-code"

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = merged_options(self, ctx)
        argv = [self.launcher("claude"), "-p", ctx.instruction, "--model", ctx.model,
                "--output-format", "stream-json", "--verbose"]
        if "allowed_tools" in options:
            argv += ["--allowedTools", str(options["allowed_tools"])]
        else:
            argv += ["--dangerously-skip-permissions"]
        if "max_turns" in options:
            argv += ["--max-turns", str(int(options["max_turns"]))]
        if "tools" in options:
            argv += ["--tools", str(options["tools"])]
        if "system_prompt" in options:
            argv += ["--system-prompt", str(options["system_prompt"])]
        return Invocation(argv, claude_env(ctx))


def claude_env(ctx: AgentContext) -> dict[str, str]:
    models = {name: ctx.model for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
                                            "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                                            "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")}
    return quiet_env(
        ANTHROPIC_BASE_URL=ctx.base_url,
        ANTHROPIC_API_KEY=ctx.api_key,
        CLAUDE_CONFIG_DIR=f"{ctx.home}/.claude",
        IS_SANDBOX="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        DISABLE_NON_ESSENTIAL_MODEL_CALLS="1",
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1",
        **models,
    )
