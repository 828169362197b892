"""``mini-swe-agent``: the ``mini`` CLI (litellm, OpenAI Chat Completions, one ``bash`` tool) on the proxy.

It runs its builtin ``mini.yaml`` in yolo mode and ends when a command's output starts with
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (the agent runs ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).
Invariant: its config (model endpoint, key, cost tracking off) comes only from ``-c`` overrides
and env, so no global config file or interactive first-run setup is ever read.
"""

from __future__ import annotations

from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.harnesses._cli import merged_options, openai_base, quiet_env


class MiniSweAgentHarness(Harness):
    """Options: step_limit (model calls before it stops; 0 = none), command_timeout (seconds, default 60),
    mode (toolcall: the ``bash`` tool; textbased: a ```mswea_bash_command block in the reply, for
    policies without tool calling)."""

    name = "mini-swe-agent"
    tool = "mini-swe-agent"

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = merged_options(self, ctx)
        textbased = options.get("mode", "toolcall") == "textbased"
        overrides = {
            "model.model_kwargs.api_base": openai_base(ctx),
            "model.model_kwargs.drop_params": "true",
            "environment.cwd": ctx.workdir,
            "environment.timeout": str(int(options.get("command_timeout", 60))),
            "agent.step_limit": str(int(options.get("step_limit", 0))),
            **({"model.model_class": "litellm_textbased"} if textbased else {}),
        }
        argv = [self.launcher("mini"), "-m", f"openai/{ctx.model}", "-t", ctx.instruction, "-y",
                "--exit-immediately", "-o", f"{ctx.logs_dir}/mini.traj.json",
                "-c", "mini_textbased.yaml" if textbased else "mini.yaml"]
        for key, value in overrides.items():
            argv += ["-c", f"{key}={value}"]
        env = quiet_env(
            OPENAI_API_KEY=ctx.api_key,
            MSWEA_CONFIGURED="true",
            MSWEA_GLOBAL_CONFIG_DIR=f"{ctx.home}/.config/mini-swe-agent",
            MSWEA_COST_TRACKING="ignore_errors",
            MSWEA_SILENT_STARTUP="1",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_TELEMETRY="False",
        )
        return Invocation(argv, env)
