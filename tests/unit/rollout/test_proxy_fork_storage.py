"""Forked calls (a call that does not extend an earlier one: OpenClaw-style resends, retries) are stored as a
reference to the ids they share with an earlier segment plus their own suffix; every reader (the trajectory,
export, a restarted proxy) sees the full prompt, exactly the ids the engine was given."""

from __future__ import annotations

import asyncio
from pathlib import Path

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import PATHS, InProcessProxy

SYSTEM = "You are a careful agent working in a sandbox; read the files before you change them. " * 40


def body(user: str) -> dict:
    return {"model": "smollm2", "messages": [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": user}]}


def test_forks_store_a_shared_prefix_once_and_read_back_whole(tmp_path: Path):
    proxy = InProcessProxy([ScriptTurn(text="done")], data_dir=tmp_path)
    users = ["list the files", "list the files", "now count them", "list the files"]

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            sizes = []
            for user in users:
                await client.post(PATHS["chat"], json=body(user), headers={"authorization": f"Bearer {token}"})
                sizes.append((tmp_path / "rollouts" / f"{rollout_id}.log").stat().st_size)
            return rollout_id, sizes, await proxy.trajectory(client, rollout_id)
    rollout_id, sizes, trajectory = asyncio.run(scenario())
    assert [call["kind"] for call in trajectory["calls"]] == ["clean", "fork", "fork", "fork"]
    # every segment's prompt is exactly what the engine saw for its call
    assert [segment["prompt_ids"] for segment in trajectory["segments"]] == proxy.engine.prompts
    first, forks = sizes[0], sizes[-1] - sizes[0]
    assert forks < 0.1 * first, sizes  # the system prompt is stored once, not once per call
    again = InProcessProxy([ScriptTurn(text="done")], data_dir=tmp_path)

    async def reread():
        async with again.client() as client:
            return await again.trajectory(client, rollout_id)
    assert asyncio.run(reread())["segments"] == trajectory["segments"]
