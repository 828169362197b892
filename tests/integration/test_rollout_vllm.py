"""The react harness against the real policy: vLLM CPU serving SmolLM2, through the recording proxy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.tasks import write_task

pytestmark = [pytest.mark.docker, pytest.mark.model]


def make_task(root: Path, name: str) -> Path:
    return write_task(root, name, agent_timeout=300, solution=None)


def test_react_rollout_against_vllm_records_a_token_exact_trajectory(tmp_path: Path, vllm_base_url: str):
    task = make_task(tmp_path, "hello")
    engine_url = vllm_base_url.removesuffix("/v1")
    config = RolloutConfig(tasks=[str(task)], harness="react", run_dir=str(tmp_path / "run"),
                           harness_options={"tool_choice": "required", "max_turns": 2, "max_tokens": 64,
                                            "temperature": 0.7},
                           proxy=ProxySettings(engine={"type": "vllm", "base_url": engine_url}))
    run_dir, results = asyncio.run(run_rollouts(config))
    [result] = results
    # A 135M model may or may not solve it; either way it is the policy's outcome, recorded whole.
    assert result.status in ("success", "failure"), result.reason
    trajectory = json.loads((run_dir / result.trajectory).read_text())
    assert trajectory["status"] == result.status and trajectory["reward"] == result.reward
    calls = trajectory["calls"]
    assert calls and all(call["status"] == "ok" and call["dialect"] == "chat" for call in calls)
    for segment in trajectory["segments"]:
        mask, logprobs = segment["response_mask"], segment["logprobs"]
        assert len(segment["response_ids"]) == len(mask) == len(logprobs)
        sampled = [lp for lp, m in zip(logprobs, mask) if m == 1]
        assert sampled and all(lp <= 0 for lp in sampled)
    assert result.model_usage["tokens_out"] > 0
