"""``claude-code``: ``claude -p`` against the proxy's Anthropic Messages endpoint (SSE).

Pointed there by ``ANTHROPIC_BASE_URL`` (the proxy root; Claude Code appends ``/v1/messages``)
with the rollout token as ``ANTHROPIC_API_KEY``; every model alias (the small/fast one used for
side calls included) resolves to ``ctx.model``. Permissions are skipped — the container is the
sandbox — which Claude Code allows as root only with ``IS_SANDBOX=1``.
Invariant: non-essential traffic (telemetry, error reports, update checks) is off.
"""

from __future__ import annotations

from pydantic import Field

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import quiet_env


class ClaudeCodeHarness(Harness):
    """Anthropic's Claude Code, non-interactive (``claude -p``, stream-json output).

    ``tools`` and ``system_prompt`` shrink its ~12k-token prompt for small-context policies."""

    class Options(HarnessOptions):
        max_turns: int | None = Field(None, ge=1)
        """Agentic turns before it stops (unset: Claude Code's own limit)."""
        allowed_tools: str | None = None
        """Tools allowed without asking, e.g. "Bash Write" (unset: every permission check is skipped)."""
        tools: str | None = None
        """The built-in tools offered at all, e.g. "Write,Bash" (unset: all of them)."""
        system_prompt: str | None = None
        """Replaces Claude Code's default system prompt."""

    name = "claude-code"
    memory_mb = 192  # its own peak on the hello task: 130 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("npm", "@anthropic-ai/claude-code@2.1.332", "claude")
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = self.options
        argv = [self.launcher(), "-p", ctx.instruction, "--model", ctx.model,
                "--output-format", "stream-json", "--verbose"]
        if options.allowed_tools is not None:
            argv += ["--allowedTools", options.allowed_tools]
        else:
            argv += ["--dangerously-skip-permissions"]
        if options.max_turns is not None:
            argv += ["--max-turns", str(options.max_turns)]
        if options.tools is not None:
            argv += ["--tools", options.tools]
        if options.system_prompt is not None:
            argv += ["--system-prompt", options.system_prompt]
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
