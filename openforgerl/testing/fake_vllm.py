"""A scripted stand-in for a vLLM server: fixed answer, fixed latency, the routes the proxy uses.

Serves ``GET /v1/models``, ``POST /v1/completions`` (token-id prompt, streamed token ids and
logprobs, like vLLM's ``return_token_ids``) and ``POST /v1/chat/completions`` (streamed text, for
clients and other proxies that talk to an OpenAI-compatible server directly). Every answer waits
``latency_ms`` before its first token and ``token_ms`` between tokens; a request's ``stream_interval`` batches
that many tokens into each streamed chunk as vLLM does (the first and the last chunk at once). Used by
``bench/proxy.py``.

Run: ``python -m openforgerl.testing.fake_vllm --port 8001 --answer answer.json``
(answer.json: ``{"token_ids": [...], "pieces": ["text of each id", ...]}``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson


class FakeVLLM:
    def __init__(self, token_ids: list[int], pieces: list[str], *, latency_ms: float = 50.0,
                 token_ms: float = 0.0, model: str = "smollm2", max_model_len: int = 1 << 20) -> None:
        self.token_ids, self.pieces = token_ids, pieces
        self.latency, self.token_delay = latency_ms / 1000, token_ms / 1000
        self.model, self.max_model_len = model, max_model_len

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/v1/models":
            return await self._json(send, {"object": "list", "data": [
                {"id": self.model, "object": "model", "max_model_len": self.max_model_len}]})
        request = orjson.loads(body or b"{}")
        if path == "/v1/completions":
            return await self._stream(send, request, self._completion_chunk)
        if path == "/v1/chat/completions":
            return await self._stream(send, request, self._chat_chunk)
        await self._json(send, {"error": {"message": f"no route {path}"}}, 404)

    @staticmethod
    async def _json(send, data: Any, status: int = 200) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(data)})

    def _completion_chunk(self, start: int, end: int, last: bool) -> dict[str, Any]:
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.model, "choices": [{
            "index": 0, "text": "".join(self.pieces[start:end]), "token_ids": self.token_ids[start:end],
            "logprobs": {"token_logprobs": [-0.5] * (end - start), "tokens": self.pieces[start:end]},
            "finish_reason": "stop" if last else None}]}

    def _chat_chunk(self, start: int, end: int, last: bool) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.model, "choices": [{"index": 0, "delta": {"content": "".join(self.pieces[start:end])},
                                                  "finish_reason": "stop" if last else None}]}

    async def _stream(self, send, request: dict[str, Any], chunk) -> None:
        n = len(self.token_ids)
        limit = request.get("max_tokens") or request.get("max_completion_tokens") or n
        n = min(n, int(limit))
        if not request.get("stream"):
            await asyncio.sleep(self.latency + self.token_delay * n)
            text = "".join(self.pieces[:n])
            return await self._json(send, {
                "choices": [{"index": 0, "text": text, "message": {"role": "assistant", "content": text},
                             "token_ids": self.token_ids[:n], "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.sleep(self.latency)
        interval, sent = max(1, int(request.get("stream_interval") or 1)), 0
        for i in range(n):
            if i and self.token_delay:
                await asyncio.sleep(self.token_delay)
            if sent and i + 1 - sent < interval and i < n - 1:  # vLLM: the first, every interval-th, the last
                continue
            data = b"data: " + orjson.dumps(chunk(sent, i + 1, i == n - 1)) + b"\n\n"
            sent = i + 1
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--answer", required=True, help="JSON file: {token_ids, pieces}")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--token-ms", type=float, default=0.0)
    args = parser.parse_args()
    import uvicorn

    with open(args.answer, "rb") as f:
        answer = orjson.loads(f.read())
    app = FakeVLLM(answer["token_ids"], answer["pieces"], latency_ms=args.latency_ms, token_ms=args.token_ms)
    uvicorn.run(app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False,
                log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
