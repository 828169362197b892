"""A scripted OpenAI-compatible judge server on 127.0.0.1, for testing LLM-judge verifiers.

``JudgeStub(["...VERDICT: PASS", Reply(status=500), ...])`` answers ``POST /v1/chat/completions``
with the scripted replies in order (cycling) and records every request body. A plain string is
sent as a well-formed chat completion; ``Reply`` sends anything else (an HTTP error, a body that
is not JSON, another model's name). Invariant: it never invents an answer — the n-th request
gets exactly the n-th scripted reply.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``content`` makes a completion; ``raw`` replaces the whole body."""

    content: str | None = None
    status: int = 200
    raw: bytes | None = None
    model: str | None = None
    """Model name in the completion; the requested one when None."""


class JudgeStub:
    """Context manager: ``with JudgeStub(replies) as judge: judge.base_url, judge.requests``."""

    def __init__(self, replies: list[str | Reply], model: str | None = None) -> None:
        if not replies:
            raise ValueError("give at least one reply")
        self.replies = [r if isinstance(r, Reply) else Reply(content=r, model=model) for r in replies]
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> JudgeStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.replies[(len(self.requests) - 1) % len(self.replies)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                reply = stub._next(body, dict(self.headers))
                self._send(reply.status, reply.raw if reply.raw is not None else completion(reply, body))

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def completion(reply: Reply, request: dict[str, Any]) -> bytes:
    """An OpenAI chat.completion body carrying ``reply.content``."""
    return json.dumps({
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
        "model": reply.model or request.get("model", "stub"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.content or ""}}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }).encode()
