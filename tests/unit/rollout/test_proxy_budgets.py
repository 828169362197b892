"""Long-tail control: a rollout's token and call budgets. A rambling policy is cut to what its budget
leaves, every later call is a length stop the harness understands (no engine call), and the rollout is
marked ``truncated`` durably, so a trainer can mask it; the orchestrator's line says so too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import PATHS, InProcessProxy, parse_sse

RAMBLE = ScriptTurn(text="and then " * 200)
BODIES = {"chat": {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]},
          "responses": {"model": "smollm2", "input": "hi"},
          "messages": {"model": "smollm2", "max_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}}
LENGTH = {"chat": lambda b: b["choices"][0]["finish_reason"] == "length",
          "responses": lambda b: b["status"] == "incomplete",
          "messages": lambda b: b["stop_reason"] == "max_tokens"}


def calls(proxy: InProcessProxy, dialect: str, n: int, stream: bool = False) -> tuple[list, dict]:
    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            answers = []
            for _ in range(n):
                body = {**BODIES[dialect], **({"stream": True} if stream else {})}
                answers.append(await client.post(PATHS[dialect], json=body,
                                                 headers={"authorization": f"Bearer {token}"}))
            return answers, await proxy.trajectory(client, rollout_id)
    return asyncio.run(scenario())


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_a_spent_token_budget_ends_calls_as_length_stops_and_marks_the_rollout(dialect: str):
    proxy = InProcessProxy([RAMBLE], rollout_max_tokens=300)
    answers, trajectory = calls(proxy, dialect, 3)
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all(LENGTH[dialect](a.json()) for a in answers)
    generated = sum(len(segment["response_ids"]) if "response_ids" in segment else 0
                    for segment in trajectory["segments"])
    ok = [c for c in trajectory["calls"] if c["status"] == "ok"]
    assert len(proxy.engine.prompts) == 1 and len(ok) == 1  # the engine saw the first call only
    assert ok[0]["tokens_out"] == 300 and generated in (0, 300)
    assert trajectory["truncated"] and "token budget" in trajectory["truncated"]


def test_a_call_budget_stops_the_rollout_after_n_calls_streaming_too():
    proxy = InProcessProxy([ScriptTurn(text="ok")], rollout_max_calls=2)
    answers, trajectory = calls(proxy, "chat", 3, stream=True)
    finishes = [[d["choices"][0].get("finish_reason") for _, d in parse_sse(a.text)
                 if isinstance(d, dict) and d.get("choices")][-1] for a in answers]
    assert finishes == ["stop", "stop", "length"] and len(proxy.engine.prompts) == 2
    assert "call budget" in trajectory["truncated"]


def test_without_budgets_nothing_is_truncated():
    proxy = InProcessProxy([ScriptTurn(text="ok")])
    _, trajectory = calls(proxy, "chat", 3)
    assert trajectory["truncated"] is None and len(proxy.engine.prompts) == 3


def test_the_mark_survives_a_restart_of_the_proxy(tmp_path: Path):
    proxy = InProcessProxy([RAMBLE], data_dir=tmp_path, rollout_max_tokens=50)
    _, trajectory = calls(proxy, "chat", 1)
    assert trajectory["truncated"]
    again = InProcessProxy([RAMBLE], data_dir=tmp_path, rollout_max_tokens=50)

    async def read():
        async with again.client() as client:
            return await again.trajectory(client, trajectory["id"])
    assert asyncio.run(read())["truncated"] == trajectory["truncated"]

