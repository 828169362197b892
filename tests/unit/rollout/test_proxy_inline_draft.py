"""Where a call's prompt is drafted: on the event loop when the last draft of the rollout was cheap and
little is new (the hop to a worker thread would cost as much as the draft), in a worker thread otherwise
(a first call, a big new tool output), so a long render never stalls the other streams. Either way the
prompt is the same: the call extends the rollout's segment token-exactly."""

from __future__ import annotations

import asyncio
import threading

import pytest

from openforgerl.rollout.proxy import service as service_module
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import InProcessProxy


def grown(tool_outputs: list[str]) -> list[list[dict]]:
    """The histories of an agent loop: a first call, then one call per tool output, each extending the last."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
    histories = [messages]
    for i, output in enumerate(tool_outputs, 1):
        messages = [*messages, {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": f"step {i}: {output}"}]
        histories.append(messages)
    return histories


def drafted_in(histories: list[list[dict]], *, inline_below_s: float = 1.0) -> tuple[list[str], dict]:
    """One rollout whose calls send ``histories``: the thread each call's draft ran in, and the trajectory.
    ``inline_below_s``: the CPU-time bound of a cheap draft (generous by default, so a garbage collection
    during a draft on a busy CI machine does not change where the next one runs; the size rule is tested)."""
    proxy = InProcessProxy([ScriptTurn(text="ok")])
    threads: list[str] = []
    original = service_module.ProxyService._draft

    def spy(rollout, request, heads, limit):
        threads.append("loop" if threading.current_thread() is threading.main_thread() else "worker")
        return original(rollout, request, heads, limit)

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            for messages in histories:
                resp = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages},
                                         headers={"authorization": f"Bearer {token}"})
                assert resp.status_code == 200, resp.text
            return await proxy.trajectory(client, rollout_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service_module.ProxyService, "_draft", staticmethod(spy))
        patch.setattr(service_module, "INLINE_DRAFT_S", inline_below_s)
        trajectory = asyncio.run(scenario())
    return threads, trajectory


def test_cheap_follow_up_calls_are_drafted_on_the_loop_and_big_new_outputs_in_a_worker():
    big = "x" * (service_module.INLINE_NEW_CHARS + 100)
    threads, trajectory = drafted_in(grown(["small", "small", big, "small"]))
    assert threads == ["worker", "loop", "loop", "worker", "loop"]
    assert len(trajectory["segments"]) == 1  # every call extended the one segment, wherever it was drafted
    assert [c["kind"] for c in trajectory["calls"]] == ["clean"] * 5


def test_a_compacted_history_is_drafted_in_a_worker():
    """A harness that compacts its history sends mostly new text in fewer characters: not a cheap draft."""
    long_output = "y" * (service_module.INLINE_NEW_CHARS + 500)
    system = {"role": "system", "content": "You are an agent."}
    histories = [[system, {"role": "user", "content": long_output}],
                 [system, {"role": "user", "content": long_output}],  # the same again: cheap
                 [system, {"role": "user", "content": "summary of the work so far"}]]  # compacted
    threads, _ = drafted_in(histories)
    assert threads == ["worker", "loop", "worker"]


def test_a_slow_draft_sends_the_next_one_to_a_worker():
    threads, trajectory = drafted_in(grown(["small", "small"]), inline_below_s=0.0)  # every draft counts as slow
    assert threads == ["worker", "worker", "worker"]
    assert len(trajectory["segments"]) == 1


def test_message_chars_counts_text_parts_and_tool_arguments():
    messages = [{"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url"}]},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"function": {"name": "ls", "arguments": '{"p": "x"}'}}]},
                {"role": "tool", "content": "12345"}]
    assert service_module.message_chars(messages) == 3 + 10 + 5
