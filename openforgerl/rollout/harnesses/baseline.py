"""The two harnesses environment validation runs: ``nop`` (does nothing) and ``oracle`` (solve.sh)."""

from __future__ import annotations

from pydantic import Field

from openforgerl.errors import UserError
from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, Invocation
from openforgerl.rollout.runtime import Sandbox
from openforgerl.tasks import Task


class NopHarness(Harness):
    """Does nothing: a task's verifier must score it at most nop_max (usually 0)."""

    name = "nop"
    uses_model = False

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["true"])


class OracleHarness(Harness):
    """Runs the task's reference solution: the verifier must score it at least oracle_min. With
    ``script`` it runs another script of solution/ instead, e.g. a failure case that must score 0."""

    name = "oracle"
    uses_model = False

    class Options(HarnessOptions):
        script: str = Field("solve.sh", pattern=r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*\.sh$")
        """The script under the task's solution/ to run (default the reference solution, solve.sh)."""

    options: Options

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        script = task.solution_dir / self.options.script
        if not script.is_file():
            what = "the reference solution" if self.options.script == "solve.sh" else "that script"
            raise UserError(f"{script}: missing", fix=f"add {what}")
        await sandbox.put(task.solution_dir, "/")

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["bash", f"/solution/{self.options.script}"])
