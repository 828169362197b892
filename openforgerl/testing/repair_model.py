"""A scripted OpenAI-compatible chat model on 127.0.0.1, standing in for the LLM repairer's endpoint.

Serves ``GET /v1/models`` and non-streaming ``POST /v1/chat/completions``: the n-th request gets the
n-th canned reply (the last one repeats). Every request body is kept in ``requests`` so a test can
check what the repairer was shown. Stdlib only (``http.server`` in a thread)::

    with ScriptedChatModel([json.dumps({"explanation": "...", "edits": [...]})]) as model:
        forge build-env ... --repair-model model.base_url
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedChatModel:
    def __init__(self, replies: list[str], model: str = "scripted-repairer") -> None:
        if not replies:
            raise ValueError("give at least one reply")
        self.replies, self.model = replies, model
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the model first (use it as a context manager)"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_reply(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.requests.append(body)
            return self.replies[min(len(self.requests), len(self.replies)) - 1]

    def __enter__(self) -> ScriptedChatModel:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _handler(model: ScriptedChatModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def send_json(self, status: int, data: Any) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                return self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            self.send_json(200, {"object": "list", "data": [{"id": model.model, "object": "model"}]})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            text = model.next_reply(body)
            self.send_json(200, {
                "id": f"chatcmpl-scripted-{len(model.requests)}", "object": "chat.completion", "created": 0,
                "model": model.model, "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
