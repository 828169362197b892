"""``browser``: the gui harness (forge-browser, Playwright driving the image's Chromium) in the sandbox.

Before the agent starts, ``prepare`` starts the task's web app when the image serves one (the gui
template's ``forge-webapp``, idempotent), and the agent opens the URL that app published.
Invariant: the agent's only model endpoint is the proxy with the rollout's token, and its browser is
the Chromium the task image ships (``CHROMIUM_PATH``), so a rollout needs nothing from outside.
"""

from __future__ import annotations

from openforgerl.errors import SandboxError
from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.runtime import Sandbox
from openforgerl.tasks import Task

WEBAPP_URL_FILE = "/run/forge-webapp/url"
"""Where the gui image's forge-webapp writes the URL it serves the task's app at."""
START_WEBAPP = "command -v forge-webapp > /dev/null || exit 0; exec forge-webapp"


class BrowserHarness(Harness):
    """Options: vision (send screenshots; for models that take images), start_url, tool_choice,
    max_turns, max_tokens, temperature, viewport (WIDTHxHEIGHT), action_timeout (seconds)."""

    name = "browser"
    tool = "browser"

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        started = await sandbox.exec(["sh", "-c", START_WEBAPP], user="0", timeout=60)
        if not started.ok:
            raise SandboxError(f"the task's web app did not start: {started.tail()}",
                               fix="check the environment's webapp/ and forge-webapp in its image")

    def invocation(self, ctx: AgentContext) -> Invocation:
        options = {**self.options, **ctx.options}
        instruction_file = f"{ctx.home}/instruction.md"
        argv = [self.launcher("forge-browser"), "--instruction-file", instruction_file, "--model", ctx.model,
                "--log", f"{ctx.logs_dir}/browser-messages.json", "--start-url-file", WEBAPP_URL_FILE]
        if options.get("vision"):
            argv.append("--vision")
        for key in ("start_url", "tool_choice", "max_turns", "max_tokens", "temperature", "viewport",
                    "action_timeout"):
            if key in options:
                argv += [f"--{key.replace('_', '-')}", str(options[key])]
        if options.get("screenshots"):
            argv += ["--screenshot-dir", f"{ctx.logs_dir}/screenshots"]
        env = {"OPENAI_BASE_URL": f"{ctx.base_url}/v1", "OPENAI_API_KEY": ctx.api_key}
        return Invocation(argv, env, {instruction_file: ctx.instruction})
