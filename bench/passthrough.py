"""The least a Python proxy can do per call: the floor that forge's proxy is measured against.

Same serving stack as ``forge proxy`` (uvicorn + uvloop + httptools, a raw ASGI app, aiohttp towards the
engine), none of its work: it reads the body, parses it (a proxy has to, to know what was asked), asks the
upstream's chat route for the same call with ``stream_interval`` set (as forge asks vLLM), and relays the
answer's bytes unchanged. With ``--record DIR`` it also appends the request and the answer to one log file
and fdatasyncs it before the answer's last bytes go out (forge's durability rule, without its encoding).
No template, no tokenising, no rollouts, no auth. Used by ``bench/proxy.py --floor``; not part of the
package: nothing should ever serve through it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import orjson

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class Relay:
    def __init__(self, upstream: str, stream_interval: int, record: Path | None) -> None:
        self.upstream, self.stream_interval = upstream, stream_interval
        self.log = os.open(record / "calls.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if record else None
        self.session: Any = None

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] in ("/health", "/v1/models"):
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        request = orjson.loads(b"".join(chunks))
        request["stream_interval"] = self.stream_interval
        body = orjson.dumps(request)
        if self.session is None:
            import aiohttp

            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512))
        async with self.session.post(self.upstream + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"}) as resp:
            await send({"type": "http.response.start", "status": resp.status, "headers": HEADERS})
            answer: list[bytes] = []
            async for piece in resp.content.iter_any():  # each piece goes out when the next arrives
                if answer:
                    await send({"type": "http.response.body", "body": answer[-1], "more_body": True})
                answer.append(piece)
        if self.log is not None:  # the last piece waits until the call is durable
            await asyncio.get_running_loop().run_in_executor(None, self._append, body + b"\n" + b"".join(answer))
        await send({"type": "http.response.body", "body": answer[-1] if answer else b""})

    def _append(self, data: bytes) -> None:
        os.write(self.log, data)
        os.fdatasync(self.log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--stream-interval", type=int, default=8)
    parser.add_argument("--record", type=Path, default=None, help="append every call to DIR/calls.log, fdatasync'd")
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(Relay(args.upstream, args.stream_interval, args.record), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", access_log=False, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
