"""Fuzz the three model endpoints and the admin API: whatever a client sends, no 5xx, no crash, no
hang, and a stream that starts ends the way its dialect ends one."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import ADMIN_TOKEN, PATHS, InProcessProxy, parse_sse

PROXY = None


def proxy() -> InProcessProxy:
    global PROXY
    if PROXY is None:
        PROXY = InProcessProxy([ScriptTurn(text="hi", tool_calls=[{"name": "f", "arguments": {"a": 1}}]),
                                ScriptTurn(text="plain")])
    return PROXY


def nested(depth: int, leaf: object) -> object:
    for _ in range(depth):
        leaf = [leaf] if depth % 2 else {"k": leaf}
    return leaf


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                      st.text(max_size=20))
deep = st.builds(nested, st.integers(120, 600), json_leaf)  # past what the proxy (or orjson) writes back out
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4),
                                                             deep),
                          max_leaves=12)


def dumps(value: object) -> bytes:
    """JSON of any nesting (orjson writes at most 254 levels; the proxy must cope with more)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value).encode()
role = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "robot", None])
part = st.one_of(st.text(max_size=30), st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "input_text", "output_text", "image_url", "tool_use", "tool_result",
                              "thinking", "bogus"]),
     "text": st.one_of(st.text(max_size=30), json_value)},
    optional={"name": st.text(max_size=8), "input": json_value, "content": json_value, "tool_use_id": st.text(max_size=5)}))
content = st.one_of(st.none(), st.text(max_size=40), st.lists(part, max_size=4), json_value)
message = st.fixed_dictionaries({"role": role, "content": content},
                                optional={"tool_calls": st.one_of(json_value, st.lists(st.fixed_dictionaries(
                                    {"id": st.text(max_size=5), "type": st.just("function"),
                                     "function": st.fixed_dictionaries({"name": st.text(max_size=8),
                                                                        "arguments": st.one_of(st.text(max_size=20),
                                                                                               json_value)})}),
                                    max_size=2)), "type": st.sampled_from(["message", "function_call",
                                                                          "function_call_output", "reasoning"]),
                                          "call_id": st.text(max_size=5), "output": content,
                                          "name": st.text(max_size=8), "arguments": st.text(max_size=20)})
tool = st.one_of(json_value, st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "custom", "web_search", "namespace"]), "name": st.text(max_size=8)},
    optional={"function": st.fixed_dictionaries({"name": st.text(max_size=8)}, optional={"parameters": json_value}),
              "input_schema": json_value, "parameters": json_value}))
body = st.fixed_dictionaries({}, optional={
    "model": st.one_of(st.text(max_size=10), json_value), "messages": st.one_of(st.lists(message, max_size=4), json_value),
    "input": st.one_of(st.text(max_size=20), st.lists(message, max_size=4), json_value),
    "system": st.one_of(st.text(max_size=20), st.lists(part, max_size=3), json_value),
    "instructions": st.one_of(st.text(max_size=20), json_value), "tools": st.one_of(st.lists(tool, max_size=3), json_value),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), json_value),
    "stream": st.one_of(st.booleans(), json_value), "max_tokens": st.one_of(st.integers(-5, 40), json_value),
    "max_output_tokens": st.one_of(st.integers(-5, 40), json_value), "temperature": json_value,
    "top_p": json_value, "stop": json_value, "stop_sequences": json_value, "n": json_value,
    "stream_options": json_value, "previous_response_id": st.one_of(st.none(), st.text(max_size=5)),
    "parallel_tool_calls": st.one_of(st.booleans(), json_value)})
raw_body = st.one_of(body.map(dumps), st.binary(max_size=200))
ROUTES = {**PATHS, "count_tokens": "/v1/messages/count_tokens"}
HANG = 60  # seconds: a guard against hangs, not a speed check (a loaded disk can take seconds to fsync)
STREAM_ENDS = {"chat": "[DONE]", "responses": "response.completed", "messages": "message_stop"}


async def post(dialect: str, data: bytes, content_type: str):
    p = proxy()
    async with p.client() as client:
        if not hasattr(p, "token"):
            _, p.token = await p.new_rollout(client)
        return await asyncio.wait_for(client.post(ROUTES[dialect], content=data, headers={
            "authorization": f"Bearer {p.token}", "content-type": content_type}), timeout=HANG)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(dialect=st.sampled_from(list(ROUTES)), data=raw_body,
       content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"]))
def test_no_request_makes_the_proxy_fail(dialect, data, content_type):
    resp = asyncio.run(post(dialect, data, content_type))
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        error = resp.json()
        assert "error" in error  # in the dialect's error shape (both shapes have an "error" key)
    elif resp.headers["content-type"] == "text/event-stream":  # a stream is never cut off or failed
        name, data = parse_sse(resp.content)[-1]
        assert STREAM_ENDS[dialect] in (name, data) or name == "response.incomplete", resp.text[-300:]


ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
rollout_id = st.one_of(st.sampled_from(["ok-1", "../../x", "a/b", ".x", "", "x" * 129, "a\x00b"]),
                       st.text(max_size=12), json_value)
admin_body = st.fixed_dictionaries({}, optional={
    "id": rollout_id, "metadata": st.one_of(st.dictionaries(st.text(max_size=8), json_value, max_size=3), json_value),
    "reward": st.one_of(st.floats(allow_nan=False, allow_infinity=False), json_value), "status": json_value})


async def admin(route: str, data: bytes, segment: str):
    p = proxy()
    async with p.client() as client:
        if route == "create":
            return await client.post("/rollouts", content=data, headers=ADMIN)
        if route == "finish":
            created, _ = await p.new_rollout(client)
            return await client.post(f"/rollouts/{created}/finish", content=data, headers=ADMIN)
        return await client.get(f"/rollouts/{quote(segment, safe='')}/trajectory", headers=ADMIN)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(["create", "finish", "trajectory"]),
       data=st.one_of(admin_body.map(dumps), st.binary(max_size=60)), segment=rollout_id.map(str))
def test_no_admin_request_makes_the_proxy_fail(route, data, segment):
    resp = asyncio.run(asyncio.wait_for(admin(route, data, segment), timeout=HANG))
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        message = resp.json()["error"]["message"]
        assert message and "\n" not in message
    files = {p.name for p in proxy().data_dir.rglob("*") if p.is_file()}
    assert all(name.endswith(".log") or name.startswith("journal-") and name.endswith(".wal") for name in files)  # and all of them in rollouts/
    assert {p.parent for p in proxy().data_dir.rglob("*") if p.is_file()} <= {proxy().data_dir / "rollouts"}
