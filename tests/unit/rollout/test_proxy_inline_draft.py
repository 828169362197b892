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


def run_loop(proxy: InProcessProxy, tool_outputs: list[str]) -> tuple[list[str], dict]:
    """One rollout: a first call, then one call per tool output (each extends the history); the thread
    each call's draft ran in, and the trajectory."""
    threads: list[str] = []
    original = service_module.ProxyService._draft

    def spy(rollout, request, heads, limit):
        threads.append("loop" if threading.current_thread() is threading.main_thread() else "worker")
        return original(rollout, request, heads, limit)

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "go"}]
            for i, output in enumerate([None, *tool_outputs]):
                if output is not None:
                    messages += [{"role": "assistant", "content": "ok"},
                                 {"role": "user", "content": f"step {i}: {output}"}]
                resp = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages},
                                         headers={"authorization": f"Bearer {token}"})
                assert resp.status_code == 200, resp.text
            return await proxy.trajectory(client, rollout_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service_module.ProxyService, "_draft", staticmethod(spy))
        trajectory = asyncio.run(scenario())
    return threads, trajectory


def test_cheap_follow_up_calls_are_drafted_on_the_loop_and_big_new_outputs_in_a_worker():
    big = "x" * (service_module.INLINE_NEW_CHARS + 100)
    threads, trajectory = run_loop(InProcessProxy([ScriptTurn(text="ok")]), ["small", "small", big, "small"])
    assert threads == ["worker", "loop", "loop", "worker", "loop"]
    assert len(trajectory["segments"]) == 1  # every call extended the one segment, wherever it was drafted
    assert [c["kind"] for c in trajectory["calls"]] == ["clean"] * 5


def test_a_compacted_history_is_drafted_in_a_worker():
    """A harness that compacts its history sends mostly new text in fewer characters: not a cheap draft."""
    long_output = "y" * (service_module.INLINE_NEW_CHARS + 500)
    threads: list[str] = []
    original = service_module.ProxyService._draft

    def spy(rollout, request, heads, limit):
        threads.append("loop" if threading.current_thread() is threading.main_thread() else "worker")
        return original(rollout, request, heads, limit)

    system = {"role": "system", "content": "You are an agent."}
    histories = [[system, {"role": "user", "content": long_output}],
                 [system, {"role": "user", "content": long_output}],  # the same again: cheap
                 [system, {"role": "user", "content": "summary of the work so far"}]]  # compacted
    proxy = InProcessProxy([ScriptTurn(text="ok")])

    async def scenario() -> None:
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            for messages in histories:
                resp = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages},
                                         headers={"authorization": f"Bearer {token}"})
                assert resp.status_code == 200, resp.text
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service_module.ProxyService, "_draft", staticmethod(spy))
        asyncio.run(scenario())
    assert threads == ["worker", "loop", "worker"]


def test_a_slow_draft_sends_the_next_one_to_a_worker(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(service_module, "INLINE_DRAFT_S", 0.0)  # every draft counts as slow
    threads, trajectory = run_loop(InProcessProxy([ScriptTurn(text="ok")]), ["small", "small"])
    assert threads == ["worker", "worker", "worker"]
    assert len(trajectory["segments"]) == 1


def test_message_chars_counts_text_parts_and_tool_arguments():
    messages = [{"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url"}]},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"function": {"name": "ls", "arguments": '{"p": "x"}'}}]},
                {"role": "tool", "content": "12345"}]
    assert service_module.message_chars(messages) == 3 + 10 + 5
