"""The real-CLI adapters' invocations: each points its CLI at the proxy with the rollout token, headless, quiet."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from openforgerl.errors import ConfigError
from openforgerl.rollout.harness import TOOLS_MOUNT, AgentContext, Invocation
from openforgerl.rollout.harnesses import make_harness
from openforgerl.rollout.harnesses.install import catalog

BASE = "http://127.0.0.1:8321"
TOKEN = "rollout-token-abc"
ADAPTERS = ["codex", "claude-code", "opencode", "openclaw", "mini-swe-agent"]


def context() -> AgentContext:
    return AgentContext(instruction="Create the file /app/hello.txt containing hi.", base_url=BASE, api_key=TOKEN,
                        model="smollm2", home="/tmp/forge-home")


def invocation(name: str, **options) -> Invocation:
    return make_harness(name, **options).invocation(context())


def everything(inv: Invocation) -> str:
    return json.dumps([inv.argv, inv.env, inv.files])


@pytest.mark.parametrize("name", ADAPTERS)
def test_every_adapter_runs_its_catalog_launcher_on_the_instruction(name: str):
    harness = make_harness(name)
    inv = harness.invocation(context())
    assert harness.name == name and harness.tool == name and name in catalog()
    assert inv.argv[0] == f"{TOOLS_MOUNT}/bin/{catalog()[name].bin}"
    assert context().instruction in inv.argv


@pytest.mark.parametrize("name", ADAPTERS)
def test_the_only_endpoint_is_the_proxy_and_the_token_stays_out_of_argv(name: str):
    inv = invocation(name)
    assert TOKEN in everything(inv) and not any(TOKEN in arg for arg in inv.argv)  # not visible in ps
    urls = re.findall(r"https?://[^\s\"'\\]+", everything(inv))
    assert urls and all(url.startswith(BASE) for url in urls)


@pytest.mark.parametrize("name", ADAPTERS)
def test_telemetry_and_update_checks_are_off(name: str):
    env = invocation(name).env
    assert env["DO_NOT_TRACK"] == "1" and env["NO_UPDATE_NOTIFIER"] == "1"


@pytest.mark.parametrize("name", ADAPTERS)
def test_config_files_live_under_the_isolated_home(name: str):
    assert all(path.startswith("/tmp/forge-home/") for path in invocation(name).files)


def test_codex_uses_a_custom_responses_provider_with_approvals_and_sandbox_off():
    inv = invocation("codex")
    assert inv.argv[1:4] == ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    assert inv.argv[inv.argv.index("--cd") + 1] == "/app"
    assert inv.env["CODEX_HOME"] == "/tmp/forge-home"
    assert not inv.env["CODEX_HOME"].startswith(inv.env["TMPDIR"])  # else Codex puts no apply_patch on PATH
    config = tomllib.loads(inv.files["/tmp/forge-home/config.toml"])
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == f"{BASE}/v1" and provider["wire_api"] == "responses"
    assert inv.env[provider["env_key"]] == TOKEN
    assert config["model"] == "smollm2" and config["approval_policy"] == "never"
    assert config["sandbox_mode"] == "danger-full-access" and config["check_for_update_on_startup"] is False
    assert config["analytics"]["enabled"] is False and "model_reasoning_effort" not in config


def test_codex_reasoning_effort_and_context_window_come_from_the_run_options():
    inv = invocation("codex", reasoning_effort="low", context_window="8192")
    config = tomllib.loads(inv.files["/tmp/forge-home/config.toml"])
    assert config["model_reasoning_effort"] == "low" and config["model_context_window"] == 8192


def test_claude_code_talks_messages_to_the_proxy_root_with_every_alias_on_the_policy():
    inv = invocation("claude-code")
    assert inv.env["ANTHROPIC_BASE_URL"] == BASE  # Claude Code appends /v1/messages itself
    assert inv.env["ANTHROPIC_API_KEY"] == TOKEN
    assert inv.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and inv.env["IS_SANDBOX"] == "1"
    assert inv.env["ANTHROPIC_SMALL_FAST_MODEL"] == inv.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "smollm2"
    assert inv.argv[1:3] == ["-p", context().instruction]
    assert inv.argv[inv.argv.index("--model") + 1] == "smollm2"
    assert "--dangerously-skip-permissions" in inv.argv and "--max-turns" not in inv.argv


def test_claude_code_allowed_tools_replace_skipping_permissions():
    argv = invocation("claude-code", allowed_tools="Bash Write", max_turns=5).argv
    assert "--dangerously-skip-permissions" not in argv
    assert argv[argv.index("--allowedTools") + 1] == "Bash Write" and argv[argv.index("--max-turns") + 1] == "5"


def test_opencode_config_content_names_the_proxy_as_its_only_provider():
    inv = invocation("opencode")
    config = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["forge"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": f"{BASE}/v1", "apiKey": TOKEN} and "smollm2" in provider["models"]
    assert config["model"] == config["small_model"] == "forge/smollm2" and config["enabled_providers"] == ["forge"]
    assert config["share"] == "disabled" and config["autoupdate"] is False
    assert config["permission"]["bash"] == config["permission"]["edit"] == "allow"
    assert inv.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1" and inv.env["OPENCODE_DISABLE_DEFAULT_PLUGINS"] == "1"
    assert inv.argv[1] == "run" and inv.argv[inv.argv.index("--model") + 1] == "forge/smollm2"
    assert "--title" in inv.argv  # a named session: no separate title-generation call


def test_openclaw_pins_a_config_whose_wire_decides_the_base_url():
    inv = invocation("openclaw")
    path = inv.argv[inv.argv.index("--config") + 1]
    provider = json.loads(inv.files[path])["models"]["providers"]["forge"]
    assert provider["api"] == "openai-completions" and provider["baseUrl"] == f"{BASE}/v1"
    assert provider["apiKey"] == TOKEN and provider["models"][0]["id"] == "smollm2"
    assert inv.argv[1:3] == ["agent", "exec"] and inv.argv[inv.argv.index("--model") + 1] == "forge/smollm2"
    assert inv.argv[inv.argv.index("--cwd") + 1] == "/app" and inv.env["OPENCLAW_NO_AUTO_UPDATE"] == "1"
    assert int(inv.argv[inv.argv.index("--timeout") + 1]) > context().timeout_sec  # our timeout fires first
    messages = invocation("openclaw", api="anthropic-messages")
    provider = json.loads(messages.files[path])["models"]["providers"]["forge"]
    assert provider["api"] == "anthropic-messages" and provider["baseUrl"] == BASE


def test_openclaw_lean_asks_for_the_reduced_local_model_tool_surface():
    assert "--local-model-lean" in invocation("openclaw", lean=True).argv
    assert "--local-model-lean" not in invocation("openclaw").argv


def test_openclaw_rejects_a_wire_the_proxy_does_not_speak():
    with pytest.raises(ConfigError, match="google-generative-ai"):
        invocation("openclaw", api="google-generative-ai")


def test_mini_swe_agent_is_configured_by_overrides_only():
    inv = invocation("mini-swe-agent", step_limit=7)
    argv = inv.argv
    assert argv[argv.index("-m") + 1] == "openai/smollm2" and argv[argv.index("-t") + 1] == context().instruction
    assert "-y" in argv and "--exit-immediately" in argv
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-c"]
    assert overrides[0] == "mini.yaml"
    assert f"model.model_kwargs.api_base={BASE}/v1" in overrides
    assert "agent.step_limit=7" in overrides and "environment.cwd=/app" in overrides
    assert inv.env["OPENAI_API_KEY"] == TOKEN and inv.env["MSWEA_CONFIGURED"] == "true"
    assert inv.env["MSWEA_COST_TRACKING"] == "ignore_errors" and inv.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_mini_swe_agent_textbased_mode_reads_a_bash_block_from_the_reply():
    argv = invocation("mini-swe-agent", mode="textbased").argv
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-c"]
    assert overrides[0] == "mini_textbased.yaml" and "model.model_class=litellm_textbased" in overrides


def test_options_given_to_the_harness_reach_its_command_line():
    harness = make_harness("claude-code", max_turns=9)
    argv = harness.invocation(context()).argv
    assert argv[argv.index("--max-turns") + 1] == "9"


def test_claude_code_tool_set_and_system_prompt_can_be_narrowed_for_small_context_policies():
    argv = invocation("claude-code", tools="Write", system_prompt="Use the Write tool.").argv
    assert argv[argv.index("--tools") + 1] == "Write"
    assert argv[argv.index("--system-prompt") + 1] == "Use the Write tool."
    assert "--tools" not in invocation("claude-code").argv
