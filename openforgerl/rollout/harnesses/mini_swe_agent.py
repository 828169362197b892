"""``mini-swe-agent``: the ``mini`` CLI (litellm, OpenAI Chat Completions, one ``bash`` tool) on the proxy.

It runs its builtin ``mini.yaml`` in yolo mode and ends when a command's output starts with
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (the agent runs ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).
Invariant: its config (model endpoint, key, cost tracking off) comes only from ``-c`` overrides
and env, so no global config file or interactive first-run setup is ever read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import openai_base, quiet_env


class MiniSweAgentHarness(Harness):
    """mini-swe-agent's ``mini`` CLI in yolo mode, one ``bash`` tool."""

    class Options(HarnessOptions):
        step_limit: int = Field(0, ge=0)
        """Model calls before it stops (0: no limit)."""
        command_timeout: int = Field(60, ge=1)
        """Seconds one bash command may run."""
        mode: Literal["toolcall", "textbased"] = "toolcall"
        """toolcall: the ``bash`` tool; textbased: a ```mswea_bash_command block in the reply, for
        policies without tool calling."""

    name = "mini-swe-agent"
    memory_mb = 256  # its own peak on the hello task: 196 MiB (bench/results/harness_memory.md), x1.25 rounded up
    package = HarnessPackage("pip", "mini-swe-agent==2.4.6", "mini", module="minisweagent.run.mini",
                             check_args=("--help",))
    options: Options

    def invocation(self, ctx: AgentContext) -> Invocation:
        textbased = self.options.mode == "textbased"
        overrides = {
            "model.model_kwargs.api_base": openai_base(ctx),
            "model.model_kwargs.drop_params": "true",
            "environment.cwd": ctx.workdir,
            "environment.timeout": str(self.options.command_timeout),
            "agent.step_limit": str(self.options.step_limit),
            **({"model.model_class": "litellm_textbased"} if textbased else {}),
        }
        argv = [self.launcher(), "-m", f"openai/{ctx.model}", "-t", ctx.instruction, "-y",
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
