"""A scripted OpenAI-compatible chat server on 127.0.0.1: the stand-in for any remote LLM endpoint.

``ScriptedChatServer(["...VERDICT: PASS", Reply(status=500), ...])`` answers
``POST /v1/chat/completions`` (non-streaming) with the scripted replies in order and serves
``GET /v1/models``. After the last reply it cycles (``after_last="cycle"``, how an LLM judge asked
k times is scripted) or repeats the last one (``"repeat"``, how a repair model that keeps proposing
is scripted). A plain string is sent as a well-formed chat completion; ``Reply`` sends anything
else (an HTTP error, a body that is not JSON, another model's name). Every request body and its
headers are kept in ``requests`` / ``headers``. Invariant: it never invents an answer — the n-th
request gets exactly the reply the script names for it. Stdlib only (``http.server`` in a thread)::

    with ScriptedChatServer([json.dumps(edits)], after_last="repeat") as model:
        forge build-env ... --repair-model model.base_url
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal


@dataclass
class Reply:
    """One scripted answer. ``content`` makes a completion; ``raw`` replaces the whole body."""

    content: str | None = None
    status: int = 200
    raw: bytes | None = None
    model: str | None = None
    """Model name in the completion; the server's, else the requested one, when None."""


class ScriptedChatServer:
    """Context manager: ``with ScriptedChatServer(replies) as server: server.base_url, server.requests``."""

    def __init__(self, replies: list[str | Reply], *, after_last: Literal["cycle", "repeat"] = "cycle",
                 model: str | None = None) -> None:
        if not replies:
            raise ValueError("give at least one reply")
        self.replies = [r if isinstance(r, Reply) else Reply(content=r) for r in replies]
        self.after_last, self.model = after_last, model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            n = len(self.requests) - 1
        if self.after_last == "cycle":
            return self.replies[n % len(self.replies)]
        return self.replies[min(n, len(self.replies) - 1)]

    def completion(self, reply: Reply, request: dict[str, Any]) -> bytes:
        """An OpenAI chat.completion body carrying ``reply.content``."""
        return json.dumps({
            "id": f"chatcmpl-scripted-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": reply.model or self.model or request.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply.content or ""}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }).encode()


def _handler(server: ScriptedChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _not_found(self) -> None:
            self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.rstrip("/") != "/v1/models":
                return self._not_found()
            name = server.model or "scripted"
            self._send(200, json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode())

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._not_found()
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            reply = server.next_reply(body, dict(self.headers))
            self._send(reply.status, reply.raw if reply.raw is not None else server.completion(reply, body))

        def log_message(self, *args: object) -> None:
            pass

    return Handler
