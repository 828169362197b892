"""The two harnesses environment validation runs: ``nop`` (does nothing) and ``oracle`` (solve.sh)."""

from __future__ import annotations

from openforgerl.errors import UserError
from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.runtime import Sandbox
from openforgerl.tasks import SOLUTION_SCRIPT, Task


class NopHarness(Harness):
    """Does nothing: a task's verifier must score it at most nop_max (usually 0)."""

    name = "nop"
    uses_model = False

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["true"])


class OracleHarness(Harness):
    """Runs the task's reference solution: the verifier must score it at least oracle_min."""

    name = "oracle"
    uses_model = False

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        if not (task.path / SOLUTION_SCRIPT).is_file():
            raise UserError(f"{task.path / SOLUTION_SCRIPT}: missing", fix="add the reference solution")
        await sandbox.put(task.solution_dir, "/")

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["bash", "/solution/solve.sh"])
