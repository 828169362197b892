"""The proxy's HTTP/1.1 client towards its engine: asyncio protocols, httptools parsing, a kept-alive pool.

Key invariant: a response's body pieces reach the caller as they arrive (``async for piece in response``),
each from the parser's callback with no stream object, client library or task in between; a response not
read to its end, or a connection in any doubt, is closed, never pooled. (A caller that has all it needs,
e.g. the engine's last token, may ``drain`` instead: the rest is read off its path, then pooled.)

Why not aiohttp (what the proxy used before): relaying the same streamed calls through it costs 1.2-1.6x the
CPU of this per call (``bench/results/proxy.md``, "The floor under other servers": the relay on uvicorn with
aiohttp vs with this client), and the proxy 1.16-1.25x. An answer is buffered as it arrives (no read pause: a
turn's answer is tokens, kilobytes). It only does what the engine route needs: one request at a time per
connection, a body of bytes, status and body back (headers are not kept), ``http``/``https``.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import httptools


class ServerDisconnected(ConnectionError):
    """The engine closed the connection before the answer was whole."""


class BadResponse(ConnectionError):
    """The engine's bytes are not HTTP/1.1."""


class Response:
    """One answer: ``status``, then its body as pieces (``async for``) or whole (``read``). Release it (or use
    it as ``async with``): read to its end, its connection goes back to the pool; otherwise it is closed."""

    def __init__(self, connection: _Connection, deadline: asyncio.TimerHandle | None) -> None:
        self.status = 0
        self.connection, self.deadline = connection, deadline
        self.head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pieces: collections.deque[bytes] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.complete, self.released, self.keep_alive, self.draining = False, False, False, False
        self.error: BaseException | None = None

    # -- the connection's side --

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self.complete or self.error is not None:
            return
        self.error = exc
        if not self.head.done():
            self.head.set_exception(exc)
            self.head.exception()  # retrieved: a failed call may never await its head
        self._wake()
        if self.released and self.draining:  # its rest never came whole: the connection is not reused
            self._give_back()

    # -- the caller's side --

    def __aiter__(self) -> Response:
        return self

    async def __anext__(self) -> bytes:
        """Everything that has arrived since the last piece (several network reads under load)."""
        while not self.pieces:
            if self.error is not None:
                raise self.error
            if self.complete:
                raise StopAsyncIteration
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        if len(self.pieces) == 1:
            return self.pieces.popleft()
        data = b"".join(self.pieces)
        self.pieces.clear()
        return data

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self])

    def _abandon(self) -> None:
        """Drop an answer whose head never came: its connection is closed, the pool's slot stays the caller's."""
        self.released = True
        if self.deadline is not None:
            self.deadline.cancel()
        self.connection.response = None
        self.connection.close()

    def drain(self) -> None:
        """The caller has all it needs (the engine's last token; what follows is ``[DONE]`` and the body's end):
        once released, the rest is read without it, then the connection goes back to the pool, or is closed
        when the rest does not come whole in time (the request's ``timeout_s`` still holds)."""
        self.draining = True

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if not (self.draining and not self.complete and self.error is None):
            self._give_back()  # else on_message_complete or _fail does, once the rest came or did not

    def _give_back(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.connection.done(self, reusable=self.complete and self.keep_alive
                             and (self.draining or not self.pieces))

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *_: Any) -> None:
        self.release()


class _Connection(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.closed, self.answered, self.idle_since = False, False, 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response._fail(ServerDisconnected(
                "the engine closed the connection" + (f" ({exc})" if exc else "")
                + (" mid-answer" if self.answered else " before answering")))

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.response is not None:
                self.response._fail(BadResponse(f"the engine's answer is not HTTP/1.1: {exc}"))
            self.close()

    def eof_received(self) -> bool | None:
        return None  # closes the transport; connection_lost follows

    # httptools callbacks
    def on_headers_complete(self) -> None:
        response = self.response
        if response is not None:
            response.status = self.parser.get_status_code()
            response.keep_alive = self.parser.should_keep_alive()
            if not response.head.done():
                response.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.pieces.append(body)
            self.response._wake()

    def on_message_complete(self) -> None:
        response = self.response
        if response is not None:
            response.keep_alive = self.parser.should_keep_alive()
            response.complete = True
            response._wake()
            if response.released and response.draining:
                response._give_back()

    # the pool's side
    def send(self, request: bytes, timeout_s: float | None) -> Response:
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(timeout_s, self._time_out) if timeout_s else None
        self.response, self.answered = Response(self, deadline), False
        self.parser = httptools.HttpResponseParser(self)
        assert self.transport is not None
        self.transport.write(request)
        return self.response

    def _time_out(self) -> None:
        if self.response is not None:
            self.response._fail(TimeoutError(f"no whole answer from the engine in {self.pool.timeout_s:g} s"))
        self.close()

    def done(self, response: Response, reusable: bool) -> None:
        if self.response is response:
            self.response = None
        if reusable and not self.closed:
            self.idle_since = time.monotonic()
            self.pool._idle.append(self)
        else:
            self.close()
        self.pool._slots.release()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Kept-alive connections to one server (``base_url``: ``http[s]://host[:port][/prefix]``); at most
    ``max_connections`` requests at once (more wait their turn). An idle connection is kept ``keepalive_s``.
    ``timeout_s`` bounds a whole request, its answer read to the end included."""

    def __init__(self, base_url: str, *, max_connections: int = 512, keepalive_s: float = 3.0,
                 timeout_s: float | None = None, connect_timeout_s: float = 5.0) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        self.host, self.tls = url.hostname, url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        self.prefix = url.path.rstrip("/")
        default_port = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = (host if default_port else f"{host}:{self.port}").encode("idna")
        self.keepalive_s, self.timeout_s, self.connect_timeout_s = keepalive_s, timeout_s, connect_timeout_s
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._ssl: ssl.SSLContext | None = None

    async def request(self, method: str, path: str, body: bytes = b"",
                      content_type: bytes = b"application/json") -> Response:
        """Send a request and wait for its status line and headers. A connection the server closes before
        any byte of the answer is sent once more, on a new connection (a kept-alive one the server closed
        as the request went out: the server never took it); a second such close is the caller's error."""
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), (self.prefix + path).encode(), self.authority)
        if body or method == "POST":
            head += b"content-type: %s\r\ncontent-length: %d\r\n" % (content_type, len(body))
        request = head + b"\r\n" + body
        await self._slots.acquire()
        try:
            for attempt in (0, 1):
                connection = (self._pooled() if attempt == 0 else None) or await self._connect()
                response = connection.send(request, self.timeout_s)
                try:
                    await response.head
                except BaseException as exc:
                    response._abandon()
                    if attempt == 0 and isinstance(exc, ServerDisconnected) and not connection.answered:
                        continue
                    raise
                return response
            raise AssertionError("unreachable")
        except BaseException:
            self._slots.release()
            raise

    def _pooled(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < self.keepalive_s:
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        _, connection = await asyncio.wait_for(loop.create_connection(
            lambda: _Connection(self), self.host, self.port, ssl=self._ssl if self.tls else None,
            server_hostname=self.host if self.tls else None), self.connect_timeout_s)
        return connection

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()
