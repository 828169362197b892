"""``react``: our reference harness (forge-react, a ReAct loop over the openai SDK) in the sandbox.

Invariant: the agent's only model endpoint is the proxy with the rollout's token; an option left
unset is not passed, so forge-react applies its own default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import flag_args, openai_base


class ReactHarness(Harness):
    """forge-react: one ``shell`` tool, a bounded number of turns."""

    class Options(HarnessOptions):
        tool_choice: Literal["auto", "required", "shell", "read_file", "write_file", "finish"] | None = None
        """auto lets the model answer in text; required forces a tool call each turn (small models need it);
        a tool name forces a call of that tool each turn (the policy writes only its arguments)."""
        max_turns: int | None = Field(None, ge=1)
        """Model calls before the agent stops (unset: forge-react's default)."""
        max_tokens: int | None = Field(None, ge=1)
        """Completion tokens per model call (unset: forge-react's default)."""
        temperature: float | None = Field(None, ge=0)
        """Sampling temperature (unset: forge-react's default)."""

    name = "react"
    memory_mb = 64  # its own peak on the hello task: 38 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("pip", "openai==3.57.0", "forge-react", module="forge_react",
                             extra_files=("openforgerl.rollout.harnesses.react_agent:forge_react.py",),
                             check_args=("--help",))
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        instruction_file = f"{ctx.home}/instruction.md"
        argv = [self.launcher(), "--instruction-file", instruction_file, "--model", ctx.model,
                "--log", f"{ctx.logs_dir}/react-messages.json",
                *flag_args(self.options, ("tool_choice", "max_turns", "max_tokens", "temperature"))]
        env = {"OPENAI_BASE_URL": openai_base(ctx), "OPENAI_API_KEY": ctx.api_key}
        return Invocation(argv, env, {instruction_file: ctx.instruction})
