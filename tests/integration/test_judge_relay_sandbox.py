"""An LLM-judge verifier in an isolated sandbox reaches the run's judge through the judge relay.

Real Docker, the default isolated network (no route out; only what the run exposes on the gateway),
the compiled llm_judge check with no base_url of its own, a scripted judge on this host's loopback.
The agent, in the same sandbox before the verifier, is given neither the relay's address nor a
token (the relay refuses calls without a running verifier's token: tests/unit/rollout/test_judge_relay.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openforgerl.rollout.judge_relay import JudgeSettings
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.harnesses import ShellHarness
from openforgerl.testing.openai_stub import ScriptedChatServer
from openforgerl.testing.tasks import write_task
from openforgerl.verifiers import compile_verifier

pytestmark = pytest.mark.docker

# The agent writes its answer and shows what it was given: nothing of the judge.
AGENT = "echo 'A haiku about containers' > /app/answer.txt; env; cat /proc/1/environ | tr '\\0' '\\n'"


def test_the_verifier_reaches_the_judge_from_an_isolated_sandbox_and_the_agent_is_not_told(tmp_path: Path):
    task = write_task(tmp_path, "haiku", test_sh=None, solution=None, instruction="Write a haiku to /app/answer.txt.\n",
                      tables={"verifier": {"judge": True}})
    compile_verifier({"type": "llm_judge", "model": "judge-7b", "rubric": "It is a haiku about containers.",
                      "inputs": ["/app/answer.txt"], "votes": 1}, task / "tests")
    with ScriptedChatServer(["Looks right.\nVERDICT: PASS"]) as judge:
        config = RolloutConfig(tasks=[str(task)], harness="shell", run_dir=str(tmp_path / "run"), network="isolated",
                               judge=JudgeSettings(base_url=judge.base_url, model="judge-7b"))
        run_dir, [result] = asyncio.run(run_rollouts(config, harness=ShellHarness(AGENT)))
        assert result.status == "success" and result.reward == 1.0, result
        assert len(judge.requests) == 1 and "A haiku about containers" in judge.requests[0]["messages"][1]["content"]
    assert result.metrics["votes"] == ["PASS"]
    seen_by_agent = (run_dir / "logs" / result.rollout_id / "agent.stdout").read_text()
    assert "PATH=" in seen_by_agent and "FORGE_JUDGE" not in seen_by_agent
