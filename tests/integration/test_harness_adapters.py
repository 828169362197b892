"""Each real harness CLI completes "create /app/hello.txt containing hi" in a container, through the proxy.

Real Docker engine, real in-run proxy (scripted engine), real harness layer: the engine answers
with a call of the harness's *own* tool set (Codex's ``exec_command``, Claude Code's ``Write``,
opencode's and OpenClaw's ``write``, mini-swe-agent's ``bash`` tool or bash block), the CLI runs
it, the verifier scores it.
The right call gives success and reward 1, a wrong one a policy failure with reward 0, and the
proxy records every call in the harness's own dialect.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import docker
import pytest

from openforgerl.rollout.harness import AgentContext
from openforgerl.rollout.harness_image import harness_image
from openforgerl.rollout.harnesses.install import install
from openforgerl.rollout.harnesses.openclaw import OpenclawHarness
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.stack.base_image import IMAGE
from openforgerl.testing.harness_scripts import SCRIPTS, TASK_TOML, VARIANTS, Script

pytestmark = [pytest.mark.docker, pytest.mark.harness]


@pytest.fixture(scope="module", autouse=True)
def harness_clis() -> None:
    """The five CLIs in the tools dir (a no-op once installed; downloads them on a fresh machine)."""
    for name in {script.harness for script in SCRIPTS}:
        install(name, lambda action: None)


def rollout(tmp_path: Path, task: Path, script: Script, content: str,
            agent_user: str | None = None) -> tuple[Any, dict[str, Any], Path]:
    engine = {"type": "scripted", "turns": script.turns(content)}
    cfg = RolloutConfig(tasks=[str(task)], harness=script.harness, harness_options=script.options, concurrency=1,
                        run_dir=str(tmp_path / "run"), proxy=ProxySettings(engine=engine), agent_user=agent_user)
    run_dir, results = asyncio.run(run_rollouts(cfg))
    assert len(results) == 1
    result = results[0]
    assert result.trajectory, result.reason
    return result, json.loads((run_dir / result.trajectory).read_text()), run_dir / "logs" / result.rollout_id


def ids(script: Script) -> str:
    return "-".join([script.harness, *script.options.values()])


@pytest.mark.parametrize("script", SCRIPTS + VARIANTS, ids=ids)
def test_right_tool_call_writes_the_file_and_scores_1(tmp_path: Path, make_task, script: Script):
    result, trajectory, logs = rollout(tmp_path, make_task(toml=TASK_TOML), script, "hi")
    agent_log = (logs / "agent.stdout").read_text() + (logs / "agent.stderr").read_text()
    assert (result.status, result.reward) == ("success", 1.0), f"{result.reason}\n{agent_log[-3000:]}"
    assert result.harness_exit_code == 0, agent_log[-3000:]
    calls = trajectory["calls"]
    assert len(calls) >= 2 and result.model_usage["calls"] == len(calls)
    assert {call["dialect"] for call in calls} == {script.dialect}
    assert all(call["status"] == "ok" for call in calls)
    assert trajectory["reward"] == 1.0 and trajectory["status"] == "success"


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_wrong_tool_call_is_a_policy_failure_with_reward_0(tmp_path: Path, make_task, script: Script):
    result, trajectory, _ = rollout(tmp_path, make_task(toml=TASK_TOML), script, "bye")
    assert (result.status, result.reward) == ("failure", 0.0), result.reason
    assert trajectory["calls"] and {call["dialect"] for call in trajectory["calls"]} == {script.dialect}


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_runs_as_the_non_root_agent_user(tmp_path: Path, make_task, script: Script):
    result, trajectory, _ = rollout(tmp_path, make_task(toml=TASK_TOML), script, "hi", agent_user="1000:1000")
    assert (result.status, result.reward) == ("success", 1.0), result.reason
    assert {call["dialect"] for call in trajectory["calls"]} == {script.dialect}


def test_openclaw_loads_its_modules_from_the_compile_cache_its_layer_carries_which_the_agent_cannot_change():
    harness = OpenclawHarness()
    client = docker.from_env()
    layer = harness_image(client, IMAGE, harness.name)
    ctx = AgentContext(instruction="hi", base_url="http://127.0.0.1:9", api_key="k", model="m")
    env = {"HOME": "/tmp", **harness.compile_cache_env(), **harness.invocation(ctx).env,
           "NODE_DEBUG_NATIVE": "COMPILE_CACHE"}
    cache = env["NODE_COMPILE_CACHE"]
    # The agent's uid runs the CLI, then tries to plant code for the next rollout: a new entry, an edited one.
    script = (f"{harness.launcher()} --version >/dev/null 2>/tmp/debug; cat /tmp/debug; "
              f"touch {cache}/planted 2>/dev/null && echo PLANTED; "
              f"for f in $(ls -d {cache}/*/* | head -3); do (echo x >\"$f\") 2>/dev/null && echo PLANTED; done; exit 0")
    out = client.containers.run(layer, ["sh", "-c", script], user="1000", network_mode="none", environment=env,
                                remove=True).decode()
    own = "file:///opt/forge/tools/openclaw/node_modules/"
    accepted = [line for line in out.splitlines()
                if own in line and line.endswith(" was accepted, keeping the in-memory entry")]
    assert len(accepted) >= 5, out
    assert "was rejected" not in out and "PLANTED" not in out, out
