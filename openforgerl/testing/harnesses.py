"""A harness double: an "agent" that runs one fixed shell script, for fault injection and cheating tests."""

from __future__ import annotations

from openforgerl.rollout.harness import AgentContext, Harness, Invocation


class ShellHarness(Harness):
    """Runs ``script`` with bash in the sandbox instead of a model-driven agent."""

    name = "shell"
    uses_model = False

    def __init__(self, script: str, memory_mb: int | None = None) -> None:
        super().__init__()
        self.script = script
        self.memory_mb = memory_mb  # what it declares its own processes need (see Harness.memory_mb)

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["bash", "-c", self.script])
