"""The least a Python proxy can do per call: the floor that forge's proxy is measured against.

Same serving stack as ``forge proxy`` (uvicorn + uvloop + httptools, a raw ASGI app, aiohttp towards the
engine), none of its work: it reads the body, parses it (a proxy has to, to know what was asked), asks the
upstream's chat route for the same call with ``stream_interval`` set (as forge asks vLLM), and relays the
answer's bytes unchanged. With ``--record DIR`` it also appends the request and the answer to one log file
and fdatasyncs it before the answer's last bytes go out (forge's durability rule, without its encoding).
No template, no tokenising, no rollouts, no auth. ``--server granian`` / ``granian-rsgi``: served by granian
(a Rust HTTP server) through ASGI or its own RSGI interface instead (``bench/proxy.py --servers``).
``--server raw``: the same relay with no framework at all, on uvloop: httptools parses both sides in asyncio
protocols, each chunk of the engine's answer is written to the client from the parser's callback (no coroutine,
no message dict, no client library per chunk); what is left is the least Python itself costs per call.
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


async def read_body(receive) -> bytes:
    """An ASGI request's whole body."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


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
        body = self._forwarded(await read_body(receive))
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


class _Upstream(asyncio.Protocol):
    """One kept-alive connection to the engine; its answer's body goes to ``sink`` as it is parsed."""

    def __init__(self, pool: list[_Upstream]) -> None:
        import httptools

        self.pool, self.parser = pool, httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.sink: _Downstream | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.piece(body)

    def on_message_complete(self) -> None:
        sink, self.sink = self.sink, None
        if self.parser.should_keep_alive():
            self.pool.append(self)
        if sink is not None:
            sink.done()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.pool:
            self.pool.remove(self)
        if self.sink is not None:
            self.sink.done()


class _Downstream(asyncio.Protocol):
    """One client connection: requests parsed by httptools, answers sent chunked as the engine's bytes come."""

    def __init__(self, relay: RawRelay) -> None:
        import httptools

        self.relay, self.parser = relay, httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url, self.body = b"", []  # type: ignore[var-annotated]
        self.answer: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        if self.url in (b"/health", b"/v1/models"):
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n"
                                 b'{"status":"ok"}')
            return
        if self.relay.client == "aiohttp":
            asyncio.ensure_future(self.relay.forward_aiohttp(self, self.relay.forwarded(body)))
        else:
            self.relay.forward(self, self.relay.forwarded(body))

    def start(self, log: bool) -> None:
        self.answer = [] if log else None  # type: ignore[assignment]
        self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")

    def piece(self, data: bytes) -> None:
        if self.answer is not None:
            self.answer.append(data)
        self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def done(self) -> None:
        self.transport.write(b"0\r\n\r\n")


class RawRelay:
    """The relay as protocols (``--server raw``); recording is left to the ASGI one (the floor section)."""

    def __init__(self, upstream: str, stream_interval: int, client: str = "raw") -> None:
        self.upstream, self.client, self.session = upstream, client, None
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.host, self.port, self.stream_interval = host, int(port), stream_interval
        self.pool: list[_Upstream] = []
        self.head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\n"
                     % upstream.removeprefix("http://").encode())

    def forwarded(self, raw: bytes) -> bytes:
        request = orjson.loads(raw)
        request["stream_interval"] = self.stream_interval
        return orjson.dumps(request)

    async def forward_aiohttp(self, down: _Downstream, body: bytes) -> None:
        if self.session is None:
            import aiohttp

            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512))
        async with self.session.post(self.upstream + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"}) as resp:
            down.start(log=False)
            async for piece in resp.content.iter_any():
                down.piece(piece)
        down.done()

    def forward(self, down: _Downstream, body: bytes) -> None:
        if self.pool:
            self._send(self.pool.pop(), down, body)
        else:
            asyncio.ensure_future(self._connect(down, body))

    async def _connect(self, down: _Downstream, body: bytes) -> None:
        _, up = await asyncio.get_running_loop().create_connection(lambda: _Upstream(self.pool), self.host, self.port)
        self._send(up, down, body)

    def _send(self, up: _Upstream, down: _Downstream, body: bytes) -> None:
        up.sink = down
        down.start(log=False)
        up.transport.write(self.head + b"content-length: %d\r\n\r\n%b" % (len(body), body))


class _Queued:
    """A sink that hands the engine's pieces to a coroutine (the ASGI relay with the raw client)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def start(self, log: bool) -> None:
        pass

    def piece(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def done(self) -> None:
        self.queue.put_nowait(None)


class AsgiRawClient(Relay):
    """The ASGI relay on uvicorn, towards the engine through the raw protocol client instead of aiohttp."""

    def __init__(self, upstream: str, stream_interval: int) -> None:
        super().__init__(upstream, stream_interval, None)
        self.raw = RawRelay(upstream, stream_interval)

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in ("/health", "/v1/models"):
            return await super().__call__(scope, receive, send)
        sink = _Queued()
        self.raw.forward(sink, self._forwarded(await read_body(receive)))  # type: ignore[arg-type]
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        while (piece := await sink.queue.get()) is not None:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def serve_raw(relay: RawRelay, port: int) -> None:
    import uvloop

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: _Downstream(relay), "127.0.0.1", port,
                                                                backlog=4096)
        await server.serve_forever()

    uvloop.run(serve())


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
    parser.add_argument("--server", default="uvicorn",
                        choices=("uvicorn", "granian", "granian-rsgi", "raw", "raw-aiohttp", "uvicorn-rawclient"))
    args = parser.parse_args()
    if args.server in ("raw", "raw-aiohttp"):
        serve_raw(RawRelay(args.upstream, args.stream_interval, args.server.removeprefix("raw-")), args.port)
        return
    if args.server == "uvicorn-rawclient":
        import uvicorn

        uvicorn.run(AsgiRawClient(args.upstream, args.stream_interval), host="127.0.0.1", port=args.port,
                    loop="uvloop", http="httptools", access_log=False, log_level="warning", backlog=4096)
        return
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
