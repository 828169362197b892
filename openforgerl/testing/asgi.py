"""One request to an ASGI app with no server in between (tests and ``bench/proxy_app.py``).

Key invariant: it imports nothing of openforgerl, so a benchmark can load this file to drive another
commit's app.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson


class AsgiCall:
    """One request as an ASGI server hands it to the proxy app, with no server: the whole body at the first
    ``receive``, then a wait for ``hang_up()`` (the client going away); every message the app sends is kept."""

    def __init__(self, method: str, path: str, token: str, body: bytes | dict[str, Any] = b"") -> None:
        self.body = body if isinstance(body, bytes) else orjson.dumps(body)
        self.scope = {"type": "http", "method": method, "path": path, "query_string": b"",
                      "headers": [(b"authorization", f"Bearer {token}".encode()),
                                  (b"content-type", b"application/json"),
                                  (b"content-length", str(len(self.body)).encode())]}
        self.sent: list[dict[str, Any]] = []
        self._read = False
        self._gone: Any = None  # an asyncio.Event, made in the loop that runs the call

    async def receive(self) -> dict[str, Any]:
        if not self._read:
            self._read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def __call__(self, app: Any) -> AsgiCall:
        await app(self.scope, self.receive, self.send)
        return self

    def hang_up(self) -> None:
        if self._gone is None:
            self._gone = asyncio.Event()
        self._gone.set()

    @property
    def status(self) -> int:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), 0)

    @property
    def writes(self) -> list[bytes]:
        """The body messages' bytes, one per message (what a server writes to the socket, one write each)."""
        return [m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"]

    @property
    def content(self) -> bytes:
        return b"".join(self.writes)
