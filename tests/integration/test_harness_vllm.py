"""Real harness CLIs against the real policy: Codex (Responses), Claude Code (Messages) and
mini-swe-agent (Chat) in containers, their calls served by vLLM CPU + SmolLM2 through the proxy.

SmolLM2-135M does not start tool calls on its own, so the proxy forces the first call of each
rollout to begin one (``force_tool_calls``); whether the file then gets written is up to the model.
What must hold whatever the model does (at ~20 tokens/s on CPU it often runs out of its budget):
one recorded policy status, every call served in the
harness's own dialect, and a token-exact record (forced tokens masked out, sampled ones with logprobs).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.proxy import policy_template
from openforgerl.testing.tasks import write_task

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.harness]

# harness -> (dialect, options, agent budget in s). Codex sends its own ~6.5k-token instructions
# on the first call, whose cold prefill alone takes 80-100 s on a 2-core vLLM CPU: it gets twice that.
CASES = {
    "codex": ("responses", {}, 200),
    "claude-code": ("messages", {"tools": "Write", "max_turns": 1,
                                 "system_prompt": "You write files with the Write tool. Be brief."}, 90),
    "mini-swe-agent": ("chat", {"step_limit": 2}, 90),
}


def make_task(root: Path) -> Path:
    return write_task(root, agent_timeout=240, solution=None)


@pytest.mark.parametrize("harness", list(CASES))
def test_real_cli_through_the_proxy_on_vllm_is_recorded_token_exactly(tmp_path: Path, vllm_base_url: str,
                                                                      harness: str):
    dialect, options, budget = CASES[harness]
    config = RolloutConfig(tasks=[str(make_task(tmp_path))], harness=harness, harness_options=options,
                           run_dir=str(tmp_path / "run"), agent_timeout_sec=budget,
                           proxy=ProxySettings(engine={"type": "vllm", "base_url": vllm_base_url.removesuffix("/v1")},
                                               force_tool_calls=1, max_tokens=128))  # SmolLM2 rambles at 12 tok/s
    run_dir, [result] = asyncio.run(run_rollouts(config))
    assert result.status in ("success", "failure", "agent_timeout"), result.reason
    trajectory = json.loads((run_dir / result.trajectory).read_text())
    calls = [c for c in trajectory["calls"] if c["status"] == "ok"]
    assert calls and {c["dialect"] for c in calls} == {dialect}, trajectory["calls"]
    forced = policy_template().encode(make_tool_parser("hermes").forced_prefix(None))
    for segment in trajectory["segments"]:
        ids, mask, logprobs = segment["response_ids"], segment["response_mask"], segment["logprobs"]
        assert len(ids) == len(mask) == len(logprobs)
        sampled = [lp for lp, m in zip(logprobs, mask) if m == 1]
        assert sampled and all(lp <= 0 for lp in sampled)
        assert all(lp == 0 for lp, m in zip(logprobs, mask) if m == 0)
    first = trajectory["segments"][calls[0]["segment"]]
    # The forced tool-call opening starts the first answer and is not the model's: mask 0.
    assert first["response_ids"][: len(forced)] == forced
    assert first["response_mask"][: len(forced) + 1] == [0] * len(forced) + [1]
