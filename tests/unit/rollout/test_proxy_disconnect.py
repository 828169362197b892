"""A harness that hangs up mid-call, at the ASGI edge: the call is cancelled and recorded, the request ends
quietly, and a server that stops (cancels the request itself) is not mistaken for a hang-up."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.asgi import AsgiCall
from openforgerl.testing.chat import CharTemplate
from openforgerl.testing.proxy import InProcessProxy

HI = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
LONG = "a long answer, streamed one character at a time. " * 4


def slow_proxy() -> InProcessProxy:
    config = ScriptedEngineConfig(turns=[ScriptTurn(text=LONG)], latency_s=0.2, token_delay_s=0.01)
    engine = ScriptedEngine(config, template=CharTemplate(), tool_parser=make_tool_parser("hermes"))
    return InProcessProxy(engine=engine)


async def in_flight(proxy: InProcessProxy, rollout_id: str) -> None:
    """Until the call is planned and waits on the engine (its first token comes 0.2 s after)."""
    while not proxy.registry.get(rollout_id).in_flight:
        await asyncio.sleep(0.005)


async def new_rollout(proxy: InProcessProxy) -> tuple[str, str]:
    async with proxy.client() as client:
        return await proxy.new_rollout(client)


@pytest.mark.parametrize("when", ["before the first token", "mid-stream"])
def test_a_hang_up_cancels_the_call_records_it_and_ends_the_request_quietly(when):
    proxy = slow_proxy()

    async def scenario():
        rollout_id, token = await new_rollout(proxy)
        client = AsgiCall("POST", "/v1/chat/completions", token, HI)
        request = asyncio.ensure_future(proxy.app(client.scope, client.receive, client.send))
        if when == "mid-stream":
            while len(client.content) < 400:  # some of the answer is out
                await asyncio.sleep(0.01)
        else:
            await in_flight(proxy, rollout_id)
        client.hang_up()
        await asyncio.wait_for(request, 5)  # ends, and not as a cancelled request
        assert not request.cancelled() and request.exception() is None
        return rollout_id, client

    rollout_id, client = asyncio.run(scenario())
    rollout = proxy.registry.get(rollout_id)
    assert [c.status for c in rollout.trajectory.calls] == ["client_disconnected"]
    assert not rollout.in_flight
    tokens_out = rollout.trajectory.calls[0].telemetry["tokens_out"]
    assert tokens_out < len(LONG)  # the engine stopped when the client left
    assert (tokens_out > 0) == (when == "mid-stream")
    if when == "mid-stream":  # the answer is cut, not ended as if whole
        assert client.sent[-1].get("more_body") is True


def test_the_request_task_carries_no_cancellation_after_a_hang_up():
    """The hang-up cancels the request's own task, then takes that back: what the server does in the same task
    after the app returns (its own clean-up awaits) is not cancelled by it."""
    proxy = slow_proxy()

    async def scenario():
        rollout_id, token = await new_rollout(proxy)
        client = AsgiCall("POST", "/v1/chat/completions", token, HI)

        async def server_side():
            await proxy.app(client.scope, client.receive, client.send)
            assert asyncio.current_task().cancelling() == 0
            await asyncio.sleep(0.01)  # would raise CancelledError if the hang-up's cancel were still pending
            return "cleaned up"

        request = asyncio.ensure_future(server_side())
        await in_flight(proxy, rollout_id)
        client.hang_up()
        return await asyncio.wait_for(request, 5)

    assert asyncio.run(scenario()) == "cleaned up"


def test_a_server_that_stops_cancels_the_request_and_is_not_taken_for_a_hang_up():
    proxy = slow_proxy()

    async def scenario():
        rollout_id, token = await new_rollout(proxy)
        client = AsgiCall("POST", "/v1/chat/completions", token, HI)
        request = asyncio.ensure_future(proxy.app(client.scope, client.receive, client.send))
        await in_flight(proxy, rollout_id)
        request.cancel()  # the server stopping: the client is still there
        with pytest.raises(asyncio.CancelledError):
            await request
        return rollout_id

    rollout_id = asyncio.run(scenario())
    rollout = proxy.registry.get(rollout_id)
    assert [c.status for c in rollout.trajectory.calls] == ["client_disconnected"]  # recorded all the same
    assert not rollout.in_flight


def test_a_hang_up_after_the_answer_changes_nothing():
    proxy = slow_proxy()

    async def scenario():
        rollout_id, token = await new_rollout(proxy)
        client = AsgiCall("POST", "/v1/chat/completions", token, dict(HI, stream=False))
        await asyncio.wait_for(proxy.app(client.scope, client.receive, client.send), 10)
        client.hang_up()  # the watcher hears it now, after the answer
        await asyncio.sleep(0.05)
        return rollout_id, client

    rollout_id, client = asyncio.run(scenario())
    assert client.status == 200
    assert orjson.loads(client.content)["choices"][0]["message"]["content"] == LONG.strip()
    assert [c.status for c in proxy.registry.get(rollout_id).trajectory.calls] == ["ok"]
