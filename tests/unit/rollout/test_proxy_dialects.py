"""Every request shape real harnesses send, replayed through its dialect against the scripted engine.

Each harness does what it does in real life: a first call that gets a tool call back, then the
full history resent with the tool's output. We check what the harness would notice (a well-formed
answer in its own dialect, streaming and not) and what training needs (the second call extends
the first one's segment; the model tokens and logprobs are exactly the engine's).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import proxy_shapes as shapes
import pytest

from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.testing.proxy import PATHS, InProcessProxy, parse_sse


def run(coro):
    return asyncio.run(coro)


# -- reading answers back, per dialect ----------------------------------------------------------

def chat_message(resp, stream: bool) -> dict[str, Any]:
    if not stream:
        return resp.json()["choices"][0]["message"]
    events = [data for _, data in parse_sse(resp.content)]
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "tool_calls", "length")
    message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": []}
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"]
        message["content"] += delta.get("content") or ""
        message["tool_calls"] += [{k: v for k, v in c.items() if k != "index"} for c in delta.get("tool_calls", [])]
    return {k: v for k, v in message.items() if v}


def responses_items(resp, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return resp.json()["output"]
    events = parse_sse(resp.content)
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert all(name == d["type"] for name, d in events)
    done = [d["item"] for name, d in events if name == "response.output_item.done"]
    assert done == events[-1][1]["response"]["output"]
    return done


def anthropic_content(resp, stream: bool) -> list[dict[str, Any]]:
    if not stream:
        return resp.json()["content"]
    events = parse_sse(resp.content)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"], _json="")
        elif name == "content_block_delta":
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                block["_json"] += delta["partial_json"]
    out = []
    for index in sorted(blocks):
        block = blocks[index]
        if block["type"] == "tool_use":
            block["input"] = json.loads(block["_json"])
        out.append({k: v for k, v in block.items() if k != "_json"})
    return out


# -- the checks every shape shares ----------------------------------------------------------------

def assert_token_exact(proxy: InProcessProxy, trajectory: dict[str, Any]) -> None:
    """Model tokens in the segment are exactly the engine's outputs, with the engine's logprobs."""
    engine = proxy.engine
    (segment,) = trajectory["segments"]
    sampled = [i for i, m in zip(segment["response_ids"], segment["response_mask"]) if m == 1]
    logprobs = [lp for lp, m in zip(segment["logprobs"], segment["response_mask"]) if m == 1]
    expected = [t for turn in engine.config.turns[:len(engine.prompts)] for t in engine.turn_ids(turn)]
    assert sampled == expected
    from openforgerl.rollout.proxy.engines.scripted import fake_logprob

    positions = [fake_logprob(t, i) for turn in engine.config.turns[:len(engine.prompts)]
                 for i, t in enumerate(engine.turn_ids(turn))]
    assert logprobs == pytest.approx(positions, abs=1e-6)
    assert all(lp == 0.0 for lp, m in zip(segment["logprobs"], segment["response_mask"]) if m == 0)
    # what the engine was given on the second call is exactly segment ids up to that call's answer
    second_prompt = engine.prompts[1]
    assert (segment["prompt_ids"] + segment["response_ids"])[:len(second_prompt)] == second_prompt


async def two_calls(proxy: InProcessProxy, dialect: str, first: dict[str, Any], make_next, read,
                    headers: dict[str, str] | None = None, path: str | None = None):
    async with proxy.client() as client:
        rollout_id, token = await proxy.new_rollout(client, {"harness": dialect})
        auth = {"authorization": f"Bearer {token}"} if dialect != "messages" else {"x-api-key": token}
        url = path or PATHS[dialect]
        r1 = await client.post(url, json=first, headers={**auth, **(headers or {})})
        assert r1.status_code == 200, r1.text
        answer1 = read(r1, first.get("stream", False))
        second = make_next(first, answer1, "wrote hello.txt")
        r2 = await client.post(url, json=second, headers={**auth, **(headers or {})})
        assert r2.status_code == 200, r2.text
        answer2 = read(r2, second.get("stream", False))
        trajectory = await proxy.trajectory(client, rollout_id)
    return answer1, answer2, trajectory


def turns(call_name: str, arguments: dict[str, Any]) -> list[ScriptTurn]:
    return [ScriptTurn(text="I will write the file.", tool_calls=[{"name": call_name, "arguments": arguments}]),
            ScriptTurn(text="Done: hello.txt contains hi.")]


def assert_one_clean_segment(trajectory: dict[str, Any]) -> None:
    assert trajectory["counts"]["clean"] == 2 and trajectory["counts"]["fork"] == 0
    assert len(trajectory["segments"]) == 1


# -- the shapes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_codex_responses_round_trip(stream):
    proxy = InProcessProxy(turns("shell", {"command": "echo hi > hello.txt"}))
    body = dict(shapes.codex_body(), stream=stream)
    items1, items2, trajectory = run(two_calls(proxy, "responses", body, shapes.codex_next, responses_items))
    assert [i["type"] for i in items1] == ["message", "function_call"]
    assert items1[0]["content"][0]["text"] == "I will write the file."
    assert json.loads(items1[1]["arguments"]) == {"command": "echo hi > hello.txt"}
    assert items1[1]["call_id"].startswith("call_")
    assert items2[0]["content"][0]["text"] == "Done: hello.txt contains hi."
    assert_one_clean_segment(trajectory)
    assert_token_exact(proxy, trajectory)


def test_codex_tools_that_are_not_functions_are_not_offered_to_the_model():
    proxy = InProcessProxy()
    run(two_calls(proxy, "responses", dict(shapes.codex_body(), stream=False), shapes.codex_next, responses_items))
    prompt = proxy.template.decode(proxy.engine.prompts[0], False)
    assert '"name": "shell"' in prompt and "mcp__fs" not in prompt and "web_search" not in prompt
    assert prompt.count("You are a coding agent") == 190  # developer messages became the system turn


@pytest.mark.parametrize("stream", [True, False])
def test_claude_code_messages_round_trip(stream):
    proxy = InProcessProxy(turns("Write", {"file_path": "hello.txt", "content": "hi"}))
    body = dict(shapes.claude_body(), stream=stream)
    content1, content2, trajectory = run(two_calls(
        proxy, "messages", body, shapes.claude_next, anthropic_content, headers=shapes.CLAUDE_HEADERS,
        path="/v1/messages?beta=true"))
    assert [b["type"] for b in content1] == ["text", "tool_use"]
    assert content1[1]["name"] == "Write" and content1[1]["input"] == {"file_path": "hello.txt", "content": "hi"}
    assert content1[1]["id"].startswith("toolu_")
    assert content2 == [{"type": "text", "text": "Done: hello.txt contains hi."}]
    assert_one_clean_segment(trajectory)
    assert_token_exact(proxy, trajectory)


def test_claude_code_system_blocks_and_system_message_both_reach_the_model():
    proxy = InProcessProxy()
    run(two_calls(proxy, "messages", dict(shapes.claude_body(), stream=False), shapes.claude_next,
                  anthropic_content))
    prompt = proxy.template.decode(proxy.engine.prompts[0], False)
    assert "You are Claude Code" in prompt and "todo list is empty" in prompt
    assert prompt.index("You are Claude Code") < prompt.index("todo list is empty") < prompt.index("<tools>")
    assert '"name": "WebSearch"' in prompt  # defer_loading is an unknown field, not a reason to drop


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("qwen_parts", [False, True], ids=["opencode", "qwen-code"])
def test_chat_completions_round_trip(stream, qwen_parts):
    proxy = InProcessProxy(turns("write_file", {"path": "hello.txt", "content": "hi"}))
    body = shapes.chat_body(stream, qwen_parts=qwen_parts)
    message1, message2, trajectory = run(two_calls(
        proxy, "chat", body, lambda b, m, o: shapes.chat_next(b, m, o, parts=qwen_parts), chat_message))
    (call,) = message1["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "write_file"
    assert json.loads(call["function"]["arguments"]) == {"path": "hello.txt", "content": "hi"}
    assert message2["content"] == "Done: hello.txt contains hi."
    assert_one_clean_segment(trajectory)
    assert_token_exact(proxy, trajectory)


def test_opencode_title_call_then_main_calls_make_two_segments():
    proxy = InProcessProxy([ScriptTurn(text="Create hello.txt"), *turns("write_file", {"path": "hello.txt"})])

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            title = await client.post(PATHS["chat"], json=shapes.opencode_title_body(), headers=auth)
            events = parse_sse(title.content)
            assert events[-2][1]["usage"]["completion_tokens"] > 0 and events[-2][1]["choices"] == []
            body = shapes.chat_body(True)
            first = await client.post(PATHS["chat"], json=body, headers=auth)
            second = await client.post(PATHS["chat"], json=shapes.chat_next(
                body, chat_message(first, True), "ok"), headers=auth)
            assert second.status_code == 200
            return await proxy.trajectory(client, rollout_id)

    trajectory = run(scenario())
    assert len(trajectory["segments"]) == 2
    assert trajectory["counts"] == {"clean": 2, "realigned": 0, "fork": 1, "engine_error": 0,
                                    "client_disconnected": 0, "interrupted": 0}


@pytest.mark.parametrize("stream", [True, False])
def test_openclaw_consecutive_user_messages_and_long_system(stream):
    proxy = InProcessProxy([ScriptTurn(text="Sure.")])

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            return await client.post(PATHS["messages"], json=dict(shapes.openclaw_body(), stream=stream),
                                     headers={"x-api-key": token})

    resp = run(scenario())
    assert resp.status_code == 200
    assert anthropic_content(resp, stream) == [{"type": "text", "text": "Sure."}]
    prompt = proxy.template.decode(proxy.engine.prompts[0], False)
    assert "<|im_start|>user\nhi<|im_end|>\n<|im_start|>user\ncreate a file" in prompt


@pytest.mark.parametrize("harness", ["mini-swe-agent", "openhands"])
def test_non_streaming_chat_harnesses(harness):
    proxy = InProcessProxy(turns("write_file", {"path": "hello.txt", "content": "hi"}))
    body = shapes.chat_body(False)
    if harness == "mini-swe-agent":
        body.pop("tools")
        body.pop("tool_choice")
        proxy.engine.config.turns[0] = ScriptTurn(text="```bash\necho hi > hello.txt\n```")
    message1, _, trajectory = run(two_calls(proxy, "chat", body, shapes.chat_next, chat_message))
    assert message1.get("content") or message1.get("tool_calls")
    assert trajectory["counts"]["fork"] == 0


def test_max_token_fields_of_each_dialect_limit_the_answer():
    proxy = InProcessProxy([ScriptTurn(text="one two three four five six seven eight nine ten")])

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            msgs = [{"role": "user", "content": "count"}]
            chat = await client.post(PATHS["chat"], json={"messages": msgs, "max_tokens": 3}, headers=auth)
            chat2 = await client.post(PATHS["chat"], json={"messages": msgs, "max_completion_tokens": 3}, headers=auth)
            resp = await client.post(PATHS["responses"], json={"input": "count", "max_output_tokens": 3}, headers=auth)
            msg = await client.post(PATHS["messages"], json={"messages": msgs, "max_tokens": 3}, headers=auth)
            return chat.json(), chat2.json(), resp.json(), msg.json()

    chat, chat2, resp, msg = run(scenario())
    assert chat["choices"][0]["finish_reason"] == "length" and chat["usage"]["completion_tokens"] == 3
    assert chat2["choices"][0]["finish_reason"] == "length"
    assert resp["status"] == "incomplete" and resp["incomplete_details"]["reason"] == "max_output_tokens"
    assert msg["stop_reason"] == "max_tokens" and msg["usage"]["output_tokens"] == 3
