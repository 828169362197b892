"""The react harness against the real policy: vLLM CPU serving SmolLM2, through the recording proxy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts

pytestmark = [pytest.mark.docker, pytest.mark.model]


def make_task(root: Path, name: str) -> Path:
    task = root / name
    for sub in ("environment", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(f'[task]\nname = "{name}"\ndomain = "claw"\n[agent]\ntimeout_sec = 300\n')
    (task / "instruction.md").write_text("Create the file /app/hello.txt containing hi.\n")
    (task / "environment" / "Dockerfile").write_text("FROM openforgerl/base:bookworm\nRUN mkdir -p /app\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/hello.txt 2>/dev/null)" = hi ] && r=1 || r=0\n'
        'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n')
    return task


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
