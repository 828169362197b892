"""``react``: our reference harness (forge-react, a ReAct loop over the openai SDK) in the sandbox."""

from __future__ import annotations

from openforgerl.rollout.harness import AgentContext, Harness, Invocation


class ReactHarness(Harness):
    """Options: tool_choice (auto|required), max_turns, max_tokens, temperature."""

    name = "react"
    tool = "react"

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = {**self.options, **ctx.options}
        instruction_file = f"{ctx.home}/instruction.md"
        argv = [self.launcher("forge-react"), "--instruction-file", instruction_file, "--model", ctx.model,
                "--log", f"{ctx.logs_dir}/react-messages.json"]
        for key in ("tool_choice", "max_turns", "max_tokens", "temperature"):
            if key in options:
                argv += [f"--{key.replace('_', '-')}", str(options[key])]
        env = {"OPENAI_BASE_URL": f"{ctx.base_url}/v1", "OPENAI_API_KEY": ctx.api_key}
        return Invocation(argv, env, {instruction_file: ctx.instruction})
