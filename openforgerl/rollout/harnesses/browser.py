"""``browser``: the gui harness (forge-browser, Playwright driving the image's Chromium) in the sandbox.

Before the agent starts, ``prepare`` starts the task's web app when the image serves one (the gui
template's ``forge-webapp``, idempotent), and the agent opens the URL that app published.
Invariant: the agent's only model endpoint is the proxy with the rollout's token, and its browser is
the Chromium the task image ships (``CHROMIUM_PATH``), so a rollout needs nothing from outside.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from openforgerl.errors import SandboxError
from openforgerl.rollout.harness import AgentContext, Harness, HarnessOptions, HarnessPackage, Invocation
from openforgerl.rollout.harnesses._cli import flag_args, openai_base
from openforgerl.rollout.runtime import Sandbox
from openforgerl.tasks import Task

WEBAPP_URL_FILE = "/run/forge-webapp/url"
"""Where the gui image's forge-webapp writes the URL it serves the task's app at."""
START_WEBAPP = "command -v forge-webapp > /dev/null || exit 0; exec forge-webapp"
FLAGS = ("start_url", "tool_choice", "max_turns", "max_tokens", "temperature", "viewport", "action_timeout")
"""Options passed on as ``--key value`` when set (unset ones keep forge-browser's defaults)."""


class BrowserHarness(Harness):
    """forge-browser: page snapshots with numbered refs, one browser action per tool call."""

    class Options(HarnessOptions):
        vision: bool = False
        """Send screenshots as image parts too (only for policies that take images)."""
        start_url: str | None = None
        """The page to open first (unset: the URL the task's web app published)."""
        tool_choice: Literal["auto", "required"] | None = None
        """auto lets the model answer in text; required forces a tool call each turn (small models need it)."""
        max_turns: int | None = Field(None, ge=1)
        """Model calls before the agent stops (unset: forge-browser's default)."""
        max_tokens: int | None = Field(None, ge=1)
        """Completion tokens per model call (unset: forge-browser's default)."""
        temperature: float | None = Field(None, ge=0)
        """Sampling temperature (unset: forge-browser's default)."""
        viewport: str | None = Field(None, pattern=r"^[1-9][0-9]*[xX][1-9][0-9]*$")
        """Browser window as WIDTHxHEIGHT, e.g. 1280x800 (unset: forge-browser's default)."""
        action_timeout: float | None = Field(None, gt=0)
        """Seconds one browser action may take (unset: forge-browser's default)."""
        screenshots: bool = False
        """Save every step's screenshot under the agent's logs (screenshots/)."""

    name = "browser"
    package = HarnessPackage("pip", "playwright==1.65.2", "forge-browser", module="forge_browser",
                             extra_files=("openforgerl.rollout.harnesses.browser_agent:forge_browser.py",),
                             check_args=("--help",))
    options: Options

    async def prepare(self, sandbox: Sandbox, task: Task) -> None:
        started = await sandbox.exec(["sh", "-c", START_WEBAPP], user="0", timeout=60)
        if not started.ok:
            raise SandboxError(f"the task's web app did not start: {started.tail()}",
                               fix="check the environment's webapp/ and forge-webapp in its image")

    def invocation(self, ctx: AgentContext) -> Invocation:
        instruction_file = f"{ctx.home}/instruction.md"
        argv = [self.launcher(), "--instruction-file", instruction_file, "--model", ctx.model,
                "--log", f"{ctx.logs_dir}/browser-messages.json", "--start-url-file", WEBAPP_URL_FILE]
        if self.options.vision:
            argv.append("--vision")
        argv += flag_args(self.options, FLAGS)
        if self.options.screenshots:
            argv += ["--screenshot-dir", f"{ctx.logs_dir}/screenshots"]
        env = {"OPENAI_BASE_URL": openai_base(ctx), "OPENAI_API_KEY": ctx.api_key}
        return Invocation(argv, env, {instruction_file: ctx.instruction})
