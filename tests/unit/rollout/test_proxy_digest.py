"""Each recorded call says what it meant: tools offered, results sent back, calls and text answered."""

from __future__ import annotations

import asyncio

from openforgerl.rollout.proxy.digest import RESULT_LIMIT
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import InProcessProxy

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("shell", "finish")]


def test_digests_follow_the_conversation():
    turns = [ScriptTurn(tool_calls=[{"name": "shell", "arguments": {"command": "ls /app"}}]),
             ScriptTurn(text="All done.")]
    proxy = InProcessProxy(turns)

    async def go():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            messages = [{"role": "user", "content": "list the files"}]
            first = (await client.post("/v1/chat/completions", headers=auth,
                                       json={"model": "m", "messages": messages, "tools": TOOLS})).json()
            call = first["choices"][0]["message"]["tool_calls"][0]
            messages += [first["choices"][0]["message"],
                         {"role": "tool", "tool_call_id": call["id"], "content": "x" * 5000}]
            await client.post("/v1/chat/completions", headers=auth,
                              json={"model": "m", "messages": messages, "tools": TOOLS})
            return await proxy.trajectory(client, rollout_id)

    calls = asyncio.run(go())["calls"]
    first, second = calls[0]["digest"], calls[1]["digest"]
    assert first["offered"] == ["shell", "finish"] and first["results"] == []
    assert first["calls"] == [{"name": "shell", "args": '{"command": "ls /app"}'}]
    assert second["results"][0]["tool"] == "shell" and len(second["results"][0]["text"]) == RESULT_LIMIT + 1
    assert second["calls"] == [] and second["text"] == "All done."
