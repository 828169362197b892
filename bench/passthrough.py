"""The least a Python proxy can do per call: the floor that forge's proxy is measured against.

Same serving stack as ``forge proxy`` (uvicorn + uvloop + httptools, a raw ASGI app, aiohttp towards the
engine), none of its work: it reads the body, parses it (a proxy has to, to know what was asked), asks the
upstream's chat route for the same call with ``stream_interval`` set (as forge asks vLLM), and relays the
answer's bytes unchanged. With ``--record DIR`` it also appends the request and the answer to one log file
and fdatasyncs it before the answer's last bytes go out (forge's durability rule, without its encoding).
No template, no tokenising, no rollouts, no auth. ``--server granian`` / ``granian-rsgi``: served by granian
(a Rust HTTP server) through ASGI or its own RSGI interface instead (``bench/proxy.py --servers``).
Used by ``bench/proxy.py --floor``; not part of the package: nothing should ever serve through it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import orjson

HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
RSGI_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


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
        body = self._forwarded(b"".join(chunks))
        async with self._post(body) as resp:
            await send({"type": "http.response.start", "status": resp.status, "headers": HEADERS})
            answer: list[bytes] = []
            async for piece in resp.content.iter_any():  # each piece goes out when the next arrives
                if answer:
                    await send({"type": "http.response.body", "body": answer[-1], "more_body": True})
                answer.append(piece)
        if self.log is not None:  # the last piece waits until the call is durable
            await asyncio.get_running_loop().run_in_executor(None, self._append, body + b"\n" + b"".join(answer))
        await send({"type": "http.response.body", "body": answer[-1] if answer else b""})

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        """The same relay on granian's own interface (RSGI: no ASGI message dicts)."""
        if scope.path in ("/health", "/v1/models"):
            proto.response_bytes(200, [("content-type", "application/json")], b'{"status":"ok"}')
            return
        body = self._forwarded(await proto())
        async with self._post(body) as resp:
            transport = proto.response_stream(resp.status, RSGI_HEADERS)
            answer: list[bytes] = []
            async for piece in resp.content.iter_any():
                if answer:
                    await transport.send_bytes(answer[-1])
                answer.append(piece)
        if self.log is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._append, body + b"\n" + b"".join(answer))
        if answer:
            await transport.send_bytes(answer[-1])

    def _forwarded(self, raw: bytes) -> bytes:
        """The request as the upstream gets it: parsed, with ``stream_interval`` set."""
        request = orjson.loads(raw)
        request["stream_interval"] = self.stream_interval
        return orjson.dumps(request)

    def _post(self, body: bytes) -> Any:
        if self.session is None:
            import aiohttp

            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512))
        return self.session.post(self.upstream + "/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})

    def _append(self, data: bytes) -> None:
        os.write(self.log, data)
        os.fdatasync(self.log)


def from_env() -> Relay:
    """The relay as granian's factory builds it in its worker (``--server granian``)."""
    record = os.environ.get("RELAY_RECORD")
    return Relay(os.environ["RELAY_UPSTREAM"], int(os.environ["RELAY_STREAM_INTERVAL"]),
                 Path(record) if record else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--stream-interval", type=int, default=8)
    parser.add_argument("--record", type=Path, default=None, help="append every call to DIR/calls.log, fdatasync'd")
    parser.add_argument("--server", choices=("uvicorn", "granian", "granian-rsgi"), default="uvicorn")
    args = parser.parse_args()
    if args.server.startswith("granian"):
        from granian import Granian
        from granian.constants import Interfaces, Loops

        os.environ.update(RELAY_UPSTREAM=args.upstream, RELAY_STREAM_INTERVAL=str(args.stream_interval),
                          RELAY_RECORD=str(args.record or ""))
        Granian("passthrough:from_env", address="127.0.0.1", port=args.port, workers=1,
                interface=Interfaces.RSGI if args.server == "granian-rsgi" else Interfaces.ASGI,
                runtime_threads=1, loop=Loops.uvloop, factory=True, backlog=4096, log_level="warning",
                working_dir=Path(__file__).parent).serve()
        return
    import uvicorn

    uvicorn.run(Relay(args.upstream, args.stream_interval, args.record), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", access_log=False, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
