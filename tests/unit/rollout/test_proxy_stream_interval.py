"""Tokens per streamed chunk from vLLM (``engine.stream_interval``): fewer chunks for the proxy to relay,
the same tokens recorded, the same text for the harness. The engine is the scripted vLLM stand-in on a
real socket (it batches as vLLM does: the first token alone, then ``stream_interval`` at a time, the rest
last); tests/integration/test_proxy_vllm.py checks the same against real vLLM."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import orjson
import pytest
import uvicorn

from openforgerl.rollout.proxy.conversation import Sampling
from openforgerl.rollout.proxy.engine import Engine, TokenChunk, VLLMEngineConfig
from openforgerl.rollout.proxy.engines.vllm import VLLMEngine
from openforgerl.testing.asgi import AsgiCall
from openforgerl.testing.chat import CharTemplate
from openforgerl.testing.fake_vllm import FakeVLLM
from openforgerl.testing.ports import free_port
from openforgerl.testing.proxy import PATHS, InProcessProxy, parse_sse

ANSWER = "The tests pass now: 3 passed in 0.2s."


@contextlib.asynccontextmanager
async def fake_vllm(template: CharTemplate) -> AsyncIterator[str]:
    ids = template.encode(ANSWER) + sorted(template.stop_ids)[:1]
    app = FakeVLLM(ids, [template.decode([i]) for i in ids[:-1]] + [""], latency_ms=1, token_ms=3)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"))
    serving = asyncio.ensure_future(server.serve())
    while not server.started:
        assert not serving.done(), "the stand-in did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving


async def chunks(base_url: str, interval: int) -> list[list[int]]:
    engine = VLLMEngine(VLLMEngineConfig(base_url=base_url, stream_interval=interval))
    try:
        return [c.token_ids async for c in engine.stream([1, 2, 3], Sampling(max_tokens=200))]
    finally:
        await engine.aclose()


@pytest.mark.parametrize("interval", [4, 8])
def test_the_engine_asks_for_that_many_tokens_per_chunk_and_gets_the_same_tokens(interval):
    template = CharTemplate()

    async def scenario():
        async with fake_vllm(template) as url:
            return await chunks(url, 1), await chunks(url, interval)

    single, batched = asyncio.run(scenario())
    answer = template.encode(ANSWER) + sorted(template.stop_ids)[:1]
    assert [t for c in single for t in c] == [t for c in batched for t in c] == answer
    # the first token alone (time to first token unchanged), then `interval` at a time, the rest last; chunks
    # that arrive in one read are merged, so check where they end: after token 1 + k * interval, or at the end
    ends = list(itertools.accumulate(len(c) for c in batched))
    assert all(end == len(answer) or (end - 1) % interval == 0 for end in ends), ends
    assert len(batched) <= 1 + -(-(len(answer) - 1) // interval) < len(single) / 2


def test_a_harness_gets_the_same_answer_and_the_record_the_same_tokens_in_fewer_chunks():
    template = CharTemplate()
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "run the tests"}], "stream": True}

    async def call(url: str, interval: int):
        proxy = InProcessProxy(engine=VLLMEngine(VLLMEngineConfig(base_url=url, stream_interval=interval)),
                               template=template)
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            resp = await client.post(PATHS["chat"], json=body, headers={"authorization": f"Bearer {token}"})
            trajectory = await proxy.trajectory(client, rollout_id)
        await proxy.engine.aclose()
        return parse_sse(resp.content), trajectory

    async def scenario():
        async with fake_vllm(template) as url:
            return await call(url, 1), await call(url, 8)

    (single, one), (batched, eight) = asyncio.run(scenario())

    def deltas(events):
        return [d["choices"][0]["delta"]["content"] for _, d in events
                if isinstance(d, dict) and d.get("choices") and d["choices"][0]["delta"].get("content")]
    assert "".join(deltas(single)) == "".join(deltas(batched)) == ANSWER
    # about a delta per token (one byte each here; the proxy merges what arrives together), against bursts of 8
    assert len(deltas(single)) > len(ANSWER) / 2
    assert len(deltas(batched)) <= 1 + -(-(len(ANSWER) - 1) // 8) < len(deltas(single)) / 3
    assert one["segments"][0]["response_ids"] == eight["segments"][0]["response_ids"]
    assert one["segments"][0]["logprobs"] == eight["segments"][0]["logprobs"]
    assert one["calls"][0]["tokens_out"] == eight["calls"][0]["tokens_out"] == len(template.encode(ANSWER)) + 1


def test_stream_interval_must_be_positive():
    with pytest.raises(ValueError, match="stream_interval"):
        VLLMEngineConfig(stream_interval=0)


class Pieces(Engine):
    """Answers in the given chunks, a little apart (as an engine's chunks arrive)."""

    def __init__(self, pieces: list[list[int]]) -> None:
        self.pieces = pieces

    async def generate(self, prompt_ids, sampling):
        raise AssertionError("the proxy streams from the engine")

    async def stream(self, prompt_ids, sampling):
        for i, piece in enumerate(self.pieces):
            await asyncio.sleep(0.01)
            yield TokenChunk(piece, [-0.1] * len(piece), "stop" if i == len(self.pieces) - 1 else None)


END_OF_STREAM = {"chat": b"data: [DONE]", "responses": b"event: response.completed", "messages": b"event: message_stop"}
BODIES = {"chat": {"messages": [{"role": "user", "content": "run the tests"}], "stream": True},
          "responses": {"input": "run the tests", "stream": True},
          "messages": {"messages": [{"role": "user", "content": "run the tests"}], "max_tokens": 50, "stream": True}}


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_an_answer_goes_out_in_one_write_per_engine_chunk_the_last_with_its_end(dialect):
    """Each write to a harness is a system call that wakes it: one per engine chunk, with the events of the
    engine's last chunk, the finish and the end of the stream together in the last one (sent once the call's
    record is durable, when the answer would have ended anyway)."""
    template = CharTemplate()
    texts = ["The", " tests", " pass."]
    pieces = [template.encode(t) for t in texts]
    pieces[-1] += sorted(template.stop_ids)[:1]
    proxy = InProcessProxy(engine=Pieces(pieces), template=template)

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
        return await AsgiCall("POST", PATHS[dialect], token, BODIES[dialect])(proxy.app)

    call = asyncio.run(scenario())
    assert call.status == 200
    writes = call.writes
    assert len(writes) == len(texts), writes
    for text, write in zip(texts, writes, strict=True):
        assert orjson.dumps(text)[1:-1] in write
    assert all(END_OF_STREAM[dialect] not in write for write in writes[:-1])
    assert END_OF_STREAM[dialect] in writes[-1] and call.sent[-1].get("more_body", False) is False


@pytest.mark.parametrize("stream", [True, False])
def test_the_next_calls_reply_key_is_worked_out_after_the_answer_went_out_and_the_next_call_extends(
        stream, monkeypatch):
    """What the next call's assistant message must match (decode + parse of the answer) is not on the answer's
    path: it is worked out once the answer's last write is out, and the next call extends the segment with it."""
    from openforgerl.rollout.proxy.lineage import Lineage

    template = CharTemplate()
    answer = template.encode("The tests pass.") + sorted(template.stop_ids)[:1]
    proxy = InProcessProxy(engine=Pieces([answer]), template=template)
    steps: list[str] = []
    reply = Lineage.reply
    monkeypatch.setattr(Lineage, "reply", lambda self, head: steps.append("reply") or reply(self, head))

    class Noted(AsgiCall):
        async def send(self, message):
            steps.append("last write" if not message.get("more_body", False) else "write")
            await super().send(message)

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
        history = [{"role": "user", "content": "run the tests"}]
        first = await Noted("POST", PATHS["chat"], token, {"messages": history, "stream": stream})(proxy.app)
        await asyncio.sleep(0.05)
        history += [{"role": "assistant", "content": "The tests pass."}, {"role": "user", "content": "thanks"}]
        second = await AsgiCall("POST", PATHS["chat"], token, {"messages": history, "stream": stream})(proxy.app)
        async with proxy.client() as client:
            return first, second, await proxy.trajectory(client, rollout_id)

    first, second, trajectory = asyncio.run(scenario())
    assert first.status == second.status == 200
    assert steps.index("reply") > steps.index("last write")  # the first call's answer was out before
    assert [c["kind"] for c in trajectory["calls"]] == ["clean", "clean"] and len(trajectory["segments"]) == 1


def test_a_stream_ends_at_the_engines_last_token_without_waiting_for_done_and_keeps_its_connection():
    """The call goes on to its record as soon as the chunk with ``finish_reason`` is in; ``[DONE]`` and the body's
    end are read off its path (here held back until the stream has ended), and the connection is reused."""
    held, connections = asyncio.Event(), []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):  # the model card (its context length)
                card = orjson.dumps({"data": [{"id": "m", "max_model_len": 4096}]})
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(card), card))
                continue
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            last = orjson.dumps({"choices": [{"index": 0, "text": "ok", "token_ids": [7, 8],
                                              "logprobs": {"token_logprobs": [-0.5, -0.25]},
                                              "finish_reason": "stop"}]})
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                         + b"%x\r\n%b\r\n" % (len(last) + 8, b"data: " + last + b"\n\n"))
            await held.wait()
            held.clear()
            writer.write(b"%x\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" % len(b"data: [DONE]\n\n"))

    async def scenario():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        engine = VLLMEngine(VLLMEngineConfig(base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}",
                                             model="m"))
        try:
            got = []
            for _ in range(2):
                got.append(await asyncio.wait_for(_collect(engine), 2))  # [DONE] still held back
                held.set()
                await asyncio.sleep(0.1)
            return got
        finally:
            await engine.aclose()
            server.close()

    got = asyncio.run(scenario())
    assert got == [([7, 8], [-0.5, -0.25], "stop")] * 2 and len(connections) == 1


async def _collect(engine: VLLMEngine) -> tuple[list[int], list[float], str | None]:
    ids, logprobs, finish = [], [], None
    async for chunk in engine.stream([1, 2, 3], Sampling(max_tokens=8)):
        ids += chunk.token_ids
        logprobs += chunk.logprobs
        finish = chunk.finish_reason or finish
    return ids, logprobs, finish
