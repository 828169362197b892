"""The proxy on the policy's real tokenizer (SmolLM2, byte-level BPE) with the scripted engine.

The unit tests run the proxy on ``CharTemplate`` (one id per byte). What only a real tokenizer can
break is checked here: BPE merges across the places the proxy cuts text (turn-by-turn prompt
encoding, the forced tool-call opening, the suffix after a reused segment), the per-token byte
table behind streaming, and token-exact trajectories with real ids.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforgerl.rollout.proxy.conversation import Sampling
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
from openforgerl.rollout.proxy.template import GIL_FREE_CHARS, IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.proxy import PATHS, InProcessProxy, parse_sse, policy_template

pytestmark = pytest.mark.model

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]
SYSTEM = {"role": "system", "content": "You are an agent."}
USER = {"role": "user", "content": "create hello.txt containing hi"}
HERMES = make_tool_parser("hermes")


def write_call(path: str, text: str = "") -> ScriptTurn:
    return ScriptTurn(text=text, tool_calls=[{"name": "write_file", "arguments": {"path": path}}])


def smollm2_proxy(turns: list[ScriptTurn]) -> InProcessProxy:
    return InProcessProxy(turns, template=policy_template())


async def chat(client, token, messages, **extra):
    resp = await client.post(PATHS["chat"], json={"messages": messages, "tools": TOOLS, **extra},
                             headers={"authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    if extra.get("stream"):
        return resp
    return resp.json()["choices"][0]["message"]


async def conversation(proxy: InProcessProxy, n_calls: int):
    """A harness loop: call, answer every tool call, resend everything; returns the trajectory."""
    async with proxy.client() as client:
        rollout_id, token = await proxy.new_rollout(client)
        messages = [SYSTEM, USER]
        for i in range(n_calls):
            reply = await chat(client, token, messages)
            messages += [reply] + [{"role": "tool", "tool_call_id": c["id"], "content": f"result {i} é😀"}
                                   for c in reply.get("tool_calls") or []]
        return await proxy.trajectory(client, rollout_id)


def assert_exact(proxy: InProcessProxy, segment: dict, sampled: list[list[int]]) -> None:
    """The segment holds exactly what the engine saw and sampled, and masks exactly the sampled ids."""
    full = segment["prompt_ids"] + segment["response_ids"]
    mask = [0] * len(segment["prompt_ids"]) + segment["response_mask"]
    assert [t for t, m in zip(full, mask, strict=True) if m] == [t for ids in sampled for t in ids]
    for prompt in proxy.engine.prompts:
        assert full[:len(prompt)] == prompt


# -- the tokenizer --------------------------------------------------------------------------------

def test_turn_by_turn_prompt_encoding_equals_encoding_the_whole_text():
    template = policy_template()
    call = {"function": {"name": "write_file", "arguments": {"path": "ü.txt"}}}
    messages = [SYSTEM, USER, {"role": "assistant", "content": " lead", "tool_calls": [call]},
                {"role": "tool", "content": "  spaced\n\n"}, {"role": "tool", "content": "é😀"},
                {"role": "assistant", "content": "x  "}, {"role": "user", "content": "<tools> {\"a\": 1}" * 40}]
    for n in range(1, len(messages) + 1):
        text = template.render(messages[:n], TOOLS, True)
        assert template.encode_prompt(text) == template.encode(text)
        assert template.encode_prompt(text) == template.encode(text)  # again, from the turn cache
    assert template._piecewise is True  # SmolLM2 splits after <|im_end|> exactly: the cache is in use


def test_long_texts_keep_their_ids_when_tokenised_off_the_gil_and_a_limit_stops_early():
    template = policy_template()
    text = "Héllo wörld 😀 <tool_call>\n{\"a\": [1, 2]}\n</tool_call> 中文  \n\n" * 200
    assert len(text) >= GIL_FREE_CHARS  # encoded through encode_batch, which releases the GIL
    assert template.encode(text) == template.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    prompt = template.render([SYSTEM] + [{"role": "user", "content": text}] * 5, TOOLS, True)
    full, early = template.encode_prompt(prompt), template.encode_prompt(prompt, limit=100)
    assert 100 < len(early) < len(full) and full[:len(early)] == early  # whole turns, then it stops
    assert len(prompt) / template.max_token_chars() <= len(full)  # the proxy's pre-check is a true lower bound


def test_the_byte_table_decodes_like_the_tokenizer():
    template = policy_template()
    table = template.token_bytes()
    assert table is not None and len(table) == len(template.tokenizer)
    ids = template.encode("Héllo 😀 <tool_call>\n{\"a\": [1, 2]}\n</tool_call> 中文 " * 3)
    assert b"".join(table[i] for i in ids).decode() == template.decode(ids)
    assert all(table[i] == b"" for i in template.stop_ids)


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("abc é😀中\n<>{}\"")), max_size=40))
def test_incremental_decoding_never_splits_characters(text):
    template = policy_template()
    ids = template.encode(text)
    decoder = IncrementalDecoder(template)
    deltas = [decoder.push([i]) for i in ids] + [decoder.flush()]
    assert "".join(deltas) == template.decode(ids)
    assert all("\ufffd" not in d for d in deltas)


def test_a_forced_opening_is_a_token_prefix_of_the_call_and_is_not_repeated():
    """BPE could merge the opening's last token with what follows; for SmolLM2 it does not."""
    template = policy_template()
    engine = ScriptedEngine(ScriptedEngineConfig(turns=[write_call("/app/x")]), template=template,
                            tool_parser=HERMES)
    forced = template.encode(HERMES.forced_prefix(None))
    assert template.decode(forced).strip() == "<tool_call>"
    prompt = template.encode("<|im_start|>assistant\n")
    whole = asyncio.run(engine.generate(prompt, Sampling())).token_ids
    continued = asyncio.run(engine.generate(prompt + forced, Sampling())).token_ids
    assert forced + continued == whole
    assert template.decode(forced + continued).count("<tool_call>") == 1


# -- trajectories with real ids ---------------------------------------------------------------------

def test_a_multi_turn_rollout_is_one_clean_segment_with_the_sampled_ids():
    turns = [write_call("a", "Writing a."), write_call("b"), ScriptTurn(text="done")]
    proxy = smollm2_proxy(turns)
    trajectory = asyncio.run(conversation(proxy, 3))
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
    assert_exact(proxy, trajectory["segments"][0], [proxy.engine.turn_ids(t) for t in turns])


def test_a_turn_the_template_cannot_reproduce_is_realigned_and_keeps_the_sampled_ids():
    compact = '<tool_call>{"name":"write_file","arguments":{"path":"a"}}</tool_call>'
    turns = [ScriptTurn(text=compact), ScriptTurn(text="done")]
    proxy = smollm2_proxy(turns)
    trajectory = asyncio.run(conversation(proxy, 2))
    assert trajectory["counts"]["realigned"] == 1 and trajectory["counts"]["fork"] == 0
    assert_exact(proxy, trajectory["segments"][0], [proxy.engine.turn_ids(t) for t in turns])


def test_required_tool_choice_masks_the_forced_tokens_out():
    proxy = smollm2_proxy([ScriptTurn(text='{"name": "write_file", "arguments": {"path": "a"}}\n</tool_call>')])

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            reply = await chat(client, token, [SYSTEM, USER], tool_choice="required")
            return reply, await proxy.trajectory(client, rollout_id)

    reply, trajectory = asyncio.run(scenario())
    assert reply["tool_calls"][0]["function"]["name"] == "write_file"
    segment = trajectory["segments"][0]
    forced = proxy.template.encode("<tool_call>\n")
    assert segment["response_ids"][:len(forced)] == forced
    assert segment["response_mask"][:len(forced)] == [0] * len(forced)
    assert set(segment["response_mask"][len(forced):]) == {1}


def streamed_text(dialect: str, events) -> str:
    if dialect == "chat":
        chunks = [d for _, d in events if d != "[DONE]" and d["choices"]]
        return "".join(d["choices"][0]["delta"].get("content") or "" for d in chunks)
    name = "response.output_text.delta" if dialect == "responses" else "content_block_delta"
    return "".join(d["delta"] if dialect == "responses" else d["delta"].get("text", "") for n, d in events if n == name)


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_each_dialect_streams_a_tool_round_trip_into_one_exact_segment(dialect):
    turns = [write_call("hello.txt", "I will write the file."), ScriptTurn(text="Done: é 😀.")]
    proxy = smollm2_proxy(turns)
    first = {"chat": {"messages": [SYSTEM, USER], "tools": TOOLS},
             "responses": {"instructions": SYSTEM["content"], "input": USER["content"],
                           "tools": [{"type": "function", "name": "write_file", "parameters": {"type": "object"}}]},
             "messages": {"system": SYSTEM["content"], "max_tokens": 100, "messages": [USER],
                          "tools": [{"name": "write_file", "input_schema": {"type": "object"}}]}}[dialect]

    def follow_up(events) -> dict:
        if dialect == "chat":
            calls = [c for _, d in events if d != "[DONE]" and d["choices"] for c in d["choices"][0]["delta"].get(
                "tool_calls", [])]
            reply = {"role": "assistant", "content": turns[0].text,
                     "tool_calls": [{k: v for k, v in c.items() if k != "index"} for c in calls]}
            return dict(first, messages=first["messages"] + [reply, {"role": "tool", "tool_call_id": calls[0]["id"],
                                                                      "content": "written"}])
        if dialect == "responses":
            items = [{k: v for k, v in d["item"].items() if k != "status"} for name, d in events
                     if name == "response.output_item.done"]
            output = {"type": "function_call_output", "call_id": items[-1]["call_id"], "output": "written"}
            return dict(first, input=[{"role": "user", "content": USER["content"]}, *items, output])
        blocks = [d["content_block"] for name, d in events if name == "content_block_start"]
        use = blocks[-1]
        content = [{"type": "text", "text": turns[0].text},
                   {"type": "tool_use", "id": use["id"], "name": use["name"], "input": {"path": "hello.txt"}}]
        result = {"type": "tool_result", "tool_use_id": use["id"], "content": "written"}
        return dict(first, messages=[USER, {"role": "assistant", "content": content},
                                     {"role": "user", "content": [result]}])

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            auth = {"authorization": f"Bearer {token}"}
            r1 = await client.post(PATHS[dialect], json=dict(first, stream=True), headers=auth)
            r2 = await client.post(PATHS[dialect], json=dict(follow_up(parse_sse(r1.content)), stream=True),
                                   headers=auth)
            assert r2.status_code == 200, r2.text
            return parse_sse(r2.content), await proxy.trajectory(client, rollout_id)

    events, trajectory = asyncio.run(scenario())
    assert streamed_text(dialect, events) == "Done: é 😀."
    assert trajectory["counts"]["clean"] == 2 and len(trajectory["segments"]) == 1
    assert_exact(proxy, trajectory["segments"][0], [proxy.engine.turn_ids(t) for t in turns])
