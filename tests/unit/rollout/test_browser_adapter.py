"""The browser adapter: how forge-browser is started for one rollout."""

from __future__ import annotations

from openforgerl.rollout.harness import AgentContext
from openforgerl.rollout.harnesses import make_harness


def context() -> AgentContext:
    return AgentContext(instruction="Subscribe Ada.", base_url="http://127.0.0.1:8321", api_key="tok",
                        model="smollm2")


def test_agent_talks_to_the_proxy_with_the_rollout_token_and_opens_the_tasks_app():
    invocation = make_harness("browser").invocation(context())
    argv = invocation.argv
    assert argv[0] == "/opt/forge/tools/bin/forge-browser"
    assert argv[argv.index("--start-url-file") + 1] == "/run/forge-webapp/url"
    assert "--vision" not in argv  # text by default: the default policy reads no images
    assert invocation.env == {"OPENAI_BASE_URL": "http://127.0.0.1:8321/v1", "OPENAI_API_KEY": "tok"}
    assert invocation.files == {"/tmp/forge-home/instruction.md": "Subscribe Ada."}


def test_harness_options_become_forge_browser_flags():
    harness = make_harness("browser", vision=True, max_turns=8, tool_choice="required", screenshots=True)
    argv = harness.invocation(context()).argv
    assert "--vision" in argv
    assert argv[argv.index("--max-turns") + 1] == "8" and argv[argv.index("--tool-choice") + 1] == "required"
    assert argv[argv.index("--screenshot-dir") + 1] == "/logs/agent/screenshots"
