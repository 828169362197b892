"""force_tool_calls: a proxy setting for policies too small to start tool calls on their own."""

from openforgerl.rollout.proxy.conversation import ChatRequest, Sampling
from openforgerl.rollout.proxy.service import ProxyService
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.chat import CharTemplate

TOOL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object", "properties": {}}}}


def service(force: int) -> ProxyService:
    return ProxyService(CharTemplate(), make_tool_parser("hermes"), engine=None, registry=None,
                        force_tool_calls=force)


def request(tools: bool = True, choice: str = "auto") -> ChatRequest:
    return ChatRequest([{"role": "user", "content": "hi"}], [TOOL] if tools else [], Sampling(), tool_choice=choice)


def test_the_first_n_calls_with_tools_are_forced_and_later_ones_are_not():
    proxy = service(force=2)
    prefix = proxy.template.decode(proxy.forced_ids(request(), 0))
    assert prefix.strip() == "<tool_call>"
    assert proxy.forced_ids(request(), 1)
    assert proxy.forced_ids(request(), 2) == []


def test_calls_without_tools_or_with_tool_choice_none_are_never_forced():
    proxy = service(force=5)
    assert proxy.forced_ids(request(tools=False), 0) == []
    assert proxy.forced_ids(request(choice="none"), 0) == []


def test_off_by_default():
    assert service(force=0).forced_ids(request(), 0) == []


def test_the_response_cap_is_the_default_and_the_ceiling():
    import asyncio

    from openforgerl.rollout.proxy.engine import ScriptTurn
    from openforgerl.testing.proxy import InProcessProxy

    async def finish(proxy: InProcessProxy, **body) -> tuple[str, int]:
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            answer = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}], **body})
        choice = answer.json()["choices"][0]
        return choice["finish_reason"], answer.json()["usage"]["completion_tokens"]

    long = [ScriptTurn(text="x" * 100)]
    assert asyncio.run(finish(InProcessProxy(long, max_tokens=5))) == ("length", 5)  # a harness that sets none
    assert asyncio.run(finish(InProcessProxy(long, max_tokens=5), max_tokens=32000)) == ("length", 5)
    assert asyncio.run(finish(InProcessProxy(long, max_tokens=5), max_tokens=3)) == ("length", 3)
    assert asyncio.run(finish(InProcessProxy(long, max_tokens=0)))[0] == "stop"  # no cap: the whole answer
