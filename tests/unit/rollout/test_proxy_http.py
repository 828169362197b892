"""What a harness or orchestrator sees at the HTTP edge: auth, refusals in its dialect, engine down."""

from __future__ import annotations

import asyncio
import socket

import pytest

from openforgerl.rollout.proxy.engine import ScriptTurn, VLLMEngineConfig
from openforgerl.rollout.proxy.engines.vllm import VLLMEngine
from openforgerl.testing.proxy import ADMIN_TOKEN, PATHS, InProcessProxy, parse_sse

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
BODIES = {"chat": {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]},
          "responses": {"model": "smollm2", "input": "hi"},
          "messages": {"model": "smollm2", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}}


def run(coro):
    return asyncio.run(coro)


def assert_dialect_error(dialect: str, resp, status: int) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    if dialect == "messages":
        assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"]
        return body["error"]["message"]
    assert body["error"]["message"] and body["error"]["type"]
    return body["error"]["message"]


async def with_rollout(proxy, scenario):
    async with proxy.client() as client:
        rollout_id, token = await proxy.new_rollout(client)
        return await scenario(client, rollout_id, token)


def test_tokens_route_calls_to_their_own_rollout_only():
    proxy = InProcessProxy([ScriptTurn(text="a")])

    async def scenario():
        async with proxy.client() as client:
            a_id, a_token = await proxy.new_rollout(client)
            b_id, _ = await proxy.new_rollout(client)
            ok = await client.post(PATHS["chat"], json=BODIES["chat"], headers={"authorization": f"Bearer {a_token}"})
            anthropic_style = await client.post(PATHS["messages"], json=BODIES["messages"], headers={"x-api-key": a_token})
            a = await proxy.trajectory(client, a_id)
            b = await proxy.trajectory(client, b_id)
            as_admin = await client.get(f"/rollouts/{b_id}/trajectory", headers={"authorization": f"Bearer {a_token}"})
            return ok, anthropic_style, a, b, as_admin

    ok, anthropic_style, a, b, as_admin = run(scenario())
    assert ok.status_code == anthropic_style.status_code == 200
    assert len(a["calls"]) == 2 and b["calls"] == []
    assert as_admin.status_code == 401  # a harness token is not an admin token


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_unknown_missing_and_finished_tokens_get_401_in_the_dialect_shape(dialect):
    proxy = InProcessProxy()

    async def scenario(client, rollout_id, token):
        unknown = await client.post(PATHS[dialect], json=BODIES[dialect], headers={"authorization": "Bearer nope"})
        missing = await client.post(PATHS[dialect], json=BODIES[dialect])
        finish = await client.post(f"/rollouts/{rollout_id}/finish", headers=ADMIN,
                                   json={"reward": 1.0, "status": "completed", "metadata": {"verifier": "ok"}})
        finished = await client.post(PATHS[dialect], json=BODIES[dialect], headers={"x-api-key": token})
        again = await client.post(f"/rollouts/{rollout_id}/finish", headers=ADMIN, json={})
        return unknown, missing, finish, finished, again

    unknown, missing, finish, finished, again = run(with_rollout(proxy, scenario))
    for resp in (unknown, missing, finished):
        assert_dialect_error(dialect, resp, 401)
    assert finish.json()["reward"] == 1.0 and finish.json()["metadata"]["verifier"] == "ok"
    assert again.status_code == 409


def test_admin_routes_need_the_admin_token():
    proxy = InProcessProxy()

    async def scenario():
        async with proxy.client() as client:
            return [await client.post("/rollouts"), await client.post("/rollouts", headers={"authorization": "Bearer x"}),
                    await client.get("/rollouts/r-1/trajectory"), await client.get("/health"),
                    await client.get("/v1/models"), await client.get("/rollouts/nope/trajectory", headers=ADMIN)]

    no_token, wrong, read, health, models, missing = run(scenario())
    assert no_token.status_code == wrong.status_code == read.status_code == 401
    assert health.json()["status"] == "ok" and models.json()["data"][0]["id"] == "smollm2"
    assert missing.status_code == 404


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_bad_input_is_refused_with_4xx_in_the_dialect_shape(dialect):
    proxy = InProcessProxy(max_body_bytes=10_000)

    async def scenario(client, rollout_id, token):
        auth = {"authorization": f"Bearer {token}"}
        return {
            "malformed": await client.post(PATHS[dialect], content=b'{"messages": [', headers=auth),
            "not_object": await client.post(PATHS[dialect], content=b"[1, 2]", headers=auth),
            "content_type": await client.post(PATHS[dialect], content=b"{}", headers={**auth, "content-type": "text/plain"}),
            "too_big": await client.post(PATHS[dialect], json={"input": "x" * 20_000, "messages": [
                {"role": "user", "content": "x" * 20_000}]}, headers=auth),
            "no_messages": await client.post(PATHS[dialect], json={"model": "smollm2"}, headers=auth),
            "bad_role": await client.post(PATHS[dialect], json={"messages": [{"role": "robot", "content": "x"}],
                                                                "input": [{"type": "message", "role": "robot"}]},
                                          headers=auth),
            "bad_max": await client.post(PATHS[dialect], json=dict(BODIES[dialect], max_tokens=-1,
                                                                   max_output_tokens=-1), headers=auth),
        }

    results = run(with_rollout(proxy, scenario))
    assert_dialect_error(dialect, results["malformed"], 400)
    assert_dialect_error(dialect, results["not_object"], 400)
    assert_dialect_error(dialect, results["content_type"], 415)
    assert_dialect_error(dialect, results["too_big"], 413)
    assert "messages" in assert_dialect_error(dialect, results["no_messages"], 400) or dialect == "responses"
    assert "robot" in assert_dialect_error(dialect, results["bad_role"], 400)
    assert_dialect_error(dialect, results["bad_max"], 400)


@pytest.mark.parametrize("policy,status", [("serve", 200), ("reject", 404)])
def test_unknown_model_is_served_or_refused_as_configured(policy, status):
    proxy = InProcessProxy(unknown_model=policy)

    async def scenario(client, rollout_id, token):
        return await client.post(PATHS["chat"], json=dict(BODIES["chat"], model="gpt-4o"),
                                 headers={"authorization": f"Bearer {token}"})

    resp = run(with_rollout(proxy, scenario))
    assert resp.status_code == status
    if status == 200:
        assert resp.json()["model"] == "gpt-4o"
    else:
        assert "smollm2" in resp.json()["error"]["message"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_engine_down_is_a_503_in_the_dialect_shape_and_recorded(dialect, stream):
    down = VLLMEngine(VLLMEngineConfig(base_url=f"http://127.0.0.1:{free_port()}"))  # nothing listens there
    proxy = InProcessProxy(engine=down)

    async def scenario(client, rollout_id, token):
        resp = await client.post(PATHS[dialect], json=dict(BODIES[dialect], stream=stream),
                                 headers={"authorization": f"Bearer {token}"})
        trajectory = await proxy.trajectory(client, rollout_id)
        await down.aclose()
        return resp, trajectory

    resp, trajectory = run(with_rollout(proxy, scenario))
    assert "engine" in assert_dialect_error(dialect, resp, 503)
    assert trajectory["counts"]["engine_error"] == 1 and trajectory["segments"] == []
    assert "127.0.0.1" in trajectory["calls"][0]["error"]


def test_count_tokens_and_paths_without_the_v1_prefix():
    proxy = InProcessProxy([ScriptTurn(text="a")])

    async def scenario(client, rollout_id, token):
        count = await client.post("/v1/messages/count_tokens", json=BODIES["messages"], headers={"x-api-key": token})
        bare = await client.post("/chat/completions", json=dict(BODIES["chat"], stream=True),
                                 headers={"authorization": f"Bearer {token}"})
        return count, bare

    count, bare = run(with_rollout(proxy, scenario))
    assert count.json()["input_tokens"] > 5
    assert parse_sse(bare.content)[-1][1] == "[DONE]"
