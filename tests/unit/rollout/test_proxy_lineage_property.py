"""Property: whatever an agent loop does (tool calls, odd JSON spacing, edited history, restarts),
every segment holds exactly the ids the engine saw and sampled, and the mask marks exactly the
sampled ones."""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import PATHS, InProcessProxy

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("ls", "cat")]

answer = st.one_of(
    st.builds(lambda t: ScriptTurn(text=t), st.sampled_from(["ok", "Done.", "Let me see.\n", " spaced  "])),
    st.builds(lambda calls: ScriptTurn(tool_calls=calls), st.lists(st.fixed_dictionaries(
        {"name": st.sampled_from(["ls", "cat"]), "arguments": st.dictionaries(
            st.sampled_from(["path", "n"]), st.one_of(st.integers(0, 9), st.sampled_from(["a", "b c"])),
            max_size=2)}), min_size=1, max_size=2)),
    st.builds(lambda name: ScriptTurn(text=f'<tool_call>{{"name":"{name}","arguments":{{}}}}</tool_call>'),
              st.sampled_from(["ls", "cat"])),  # compact JSON: the template re-renders it differently
)
action = st.sampled_from(["continue", "continue", "continue", "edit", "restart"])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(answer, action, st.booleans()), min_size=1, max_size=7))
def test_segments_are_exactly_what_the_engine_saw_and_sampled(steps):
    answers = iter([a for a, _, _ in steps])
    outputs: list[list[int]] = []
    proxy = InProcessProxy()
    engine = proxy.engine

    def respond(prompt_ids):
        turn = next(answers)
        outputs.append(engine.turn_ids(turn))
        return turn

    engine._respond = respond

    async def loop():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": "start"}]
            for i, (_, act, stream) in enumerate(steps):
                resp = await client.post(PATHS["chat"], headers={"authorization": f"Bearer {token}"},
                                         json={"messages": messages, "tools": TOOLS, "stream": stream})
                assert resp.status_code == 200, resp.text
                reply = read(resp, stream)
                if act == "continue":
                    messages = messages + [reply] + ([{"role": "tool", "content": f"out {i}"}
                                                      for _ in reply.get("tool_calls") or []]
                                                     or [{"role": "user", "content": f"next {i}"}])
                elif act == "edit":
                    messages = messages[:-1] + [{"role": "user", "content": f"edited {i}"}]
                else:
                    messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": f"again {i}"}]
            return await proxy.trajectory(client, rollout_id)

    trajectory = asyncio.run(loop())
    calls = trajectory["calls"]
    assert len(calls) == len(steps) and all(c["status"] == "ok" for c in calls)
    assert sum(trajectory["counts"][k] for k in ("clean", "realigned", "fork")) == len(steps)
    breaks = sum(act != "continue" for _, act, _ in steps[:-1])
    assert len(trajectory["segments"]) == 1 + breaks  # every continued loop extends its segment
    for segment in trajectory["segments"]:
        full = segment["prompt_ids"] + segment["response_ids"]
        mask = [0] * len(segment["prompt_ids"]) + segment["response_mask"]
        sampled = [t for t, m in zip(full, mask) if m]
        assert sampled == [t for c in segment["calls"] for t in outputs[c]]
        for c in segment["calls"]:
            prompt = engine.prompts[c]
            assert full[:len(prompt)] == prompt  # the engine saw exactly this segment's ids
            assert mask[len(prompt):len(prompt) + len(outputs[c])] == [1] * len(outputs[c])
        assert len(segment["logprobs"]) == len(segment["response_ids"])


def read(resp, stream: bool) -> dict:
    if not stream:
        return resp.json()["choices"][0]["message"]
    from openforgerl.testing.proxy import parse_sse

    message: dict = {"role": "assistant", "content": "", "tool_calls": []}
    for _, data in parse_sse(resp.content):
        if data == "[DONE]" or not data["choices"]:
            continue
        delta = data["choices"][0]["delta"]
        message["content"] += delta.get("content") or ""
        message["tool_calls"] += [{k: v for k, v in c.items() if k != "index"} for c in delta.get("tool_calls", [])]
    if not message["tool_calls"]:
        del message["tool_calls"]
    json.dumps(message)
    return message
