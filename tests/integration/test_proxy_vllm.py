"""The proxy in front of real vLLM (CPU) serving SmolLM2: what is recorded is what vLLM sampled.

Started through ``forge serve`` (an already running server is reused, and left running).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import httpx
import pytest

from openforgerl.rollout.proxy.engine import VLLMEngineConfig
from openforgerl.rollout.proxy.engines.vllm import VLLMEngine
from openforgerl.testing.proxy import PATHS, InProcessProxy, parse_sse, policy_template

pytestmark = pytest.mark.model

TOOLS = [{"type": "function", "function": {
    "name": "write_file", "description": "Write text content to a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}]


@pytest.fixture(scope="module")
def base_url() -> str:
    started = subprocess.run([sys.executable, "-m", "openforgerl", "serve", "--model", "smollm2"],
                             capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert started.returncode == 0, started.stderr
    return started.stdout.strip().splitlines()[-1].removesuffix("/v1")


def generate(base_url: str, prompt_ids: list[int], max_tokens: int) -> dict:
    """What vLLM samples for these exact ids (greedy), asked directly, without the proxy."""
    body = {"model": "smollm2", "token_ids": prompt_ids,
            "sampling_params": {"max_tokens": max_tokens, "temperature": 0, "logprobs": 0}}
    choice = httpx.post(base_url + "/inference/v1/generate", json=body, timeout=300).json()["choices"][0]
    return {"ids": choice["token_ids"], "logprobs": [e["logprob"] for e in choice["logprobs"]["content"]]}


@pytest.mark.parametrize("route", ["completions", "generate"])
def test_a_tool_rollout_through_the_proxy_records_exactly_what_vllm_sampled(base_url, route):
    engine = VLLMEngine(VLLMEngineConfig(base_url=base_url, route=route))
    proxy = InProcessProxy(engine=engine, template=policy_template())
    messages = [{"role": "user", "content": "Save the text 'hi' into the file hello.txt."}]

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            first = await client.post(PATHS["chat"], headers=auth, json={
                "messages": messages, "tools": TOOLS, "temperature": 0, "max_tokens": 60,
                "tool_choice": {"type": "function", "function": {"name": "write_file"}}})
            reply = first.json()["choices"][0]["message"]
            history = messages + [reply] + [{"role": "tool", "tool_call_id": c["id"], "content": "written"}
                                            for c in reply.get("tool_calls") or []]
            second = await client.post(PATHS["chat"], headers=auth, json={
                "messages": history, "tools": TOOLS, "temperature": 0, "max_tokens": 30, "stream": True})
            assert parse_sse(second.content)[-1][1] == "[DONE]"
            trajectory = await proxy.trajectory(client, rollout_id)
            await engine.aclose()
            return reply, trajectory

    reply, trajectory = asyncio.run(scenario())
    assert reply["tool_calls"][0]["function"]["name"] == "write_file"
    assert isinstance(json.loads(reply["tool_calls"][0]["function"]["arguments"]), dict)
    assert trajectory["counts"]["fork"] == 0 and len(trajectory["segments"]) == 1
    segment = trajectory["segments"][0]
    full = segment["prompt_ids"] + segment["response_ids"]
    mask = [0] * len(segment["prompt_ids"]) + segment["response_mask"]
    logprobs = [0.0] * len(segment["prompt_ids"]) + segment["logprobs"]
    forced = proxy.template.encode('<tool_call>\n{"name": "write_file", "arguments": ')
    for call, max_tokens in zip(trajectory["calls"], (60, 30)):
        start = call["tokens_in"] + (len(forced) if max_tokens == 60 else 0)
        sampled = generate(base_url, full[:start], max_tokens)
        assert full[start:start + call["tokens_out"]] == sampled["ids"]
        assert mask[start:start + call["tokens_out"]] == [1] * call["tokens_out"]
        assert logprobs[start:start + call["tokens_out"]] == pytest.approx(sampled["logprobs"], abs=1e-3)
    text = proxy.template.decode(full, False)
    assert "Save the text 'hi'" in text and "<tool_response>\nwritten\n</tool_response>" in text
    assert sum(segment["response_mask"]) == sum(c["tokens_out"] for c in trajectory["calls"])


@pytest.mark.parametrize("dialect", ["responses", "messages"])
def test_streaming_dialects_stream_real_tokens(base_url, dialect):
    engine = VLLMEngine(VLLMEngineConfig(base_url=base_url))
    proxy = InProcessProxy(engine=engine, template=policy_template())
    # greedy: a sampled answer could end within vLLM's first chunks, e.g. its first token half an emoji (no text
    # yet) and the rest in one chunk: one delta (it happened in CI)
    ask = "Name three colours and say why you like each."
    body = {"responses": {"input": ask, "max_output_tokens": 24, "temperature": 0, "stream": True},
            "messages": {"messages": [{"role": "user", "content": ask}], "max_tokens": 24, "temperature": 0,
                         "stream": True}}

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            resp = await client.post(PATHS[dialect], json=body[dialect], headers={"x-api-key": token})
            await engine.aclose()
            return resp

    events = parse_sse(asyncio.run(scenario()).content)
    deltas = [d for name, d in events if name in ("response.output_text.delta", "content_block_delta")]
    assert len(deltas) >= 2 and events[-1][0] in ("response.completed", "response.incomplete", "message_stop")


def test_vllm_batches_streamed_tokens_as_asked_and_samples_the_same(base_url):
    """``engine.stream_interval``: vLLM sends the first token alone, then that many per chunk; greedy, the
    tokens and logprobs are those of a chunk-per-token stream."""
    from openforgerl.rollout.proxy.conversation import Sampling

    template = policy_template()
    prompt = template.encode(template.render([{"role": "user", "content": "Write a short poem about the sea."}],
                                             None, True))

    async def chunks(interval: int):
        engine = VLLMEngine(VLLMEngineConfig(base_url=base_url, stream_interval=interval))
        try:
            return [c async for c in engine.stream(prompt, Sampling(max_tokens=24, temperature=0))]
        finally:
            await engine.aclose()

    single, batched = asyncio.run(chunks(1)), asyncio.run(chunks(4))
    assert [t for c in single for t in c.token_ids] == [t for c in batched for t in c.token_ids]
    assert [p for c in single for p in c.logprobs] == pytest.approx([p for c in batched for p in c.logprobs],
                                                                    abs=1e-3)
    n = sum(len(c.token_ids) for c in batched)
    # at most the first token alone then 4 per chunk (fewer chunks when two arrive in one read)
    assert len(batched) <= 1 + -(-(n - 1) // 4) and len(single) > 2 * len(batched), [len(c.token_ids) for c in batched]
