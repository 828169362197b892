"""The LLM judge as verifiers reach it from inside a sandbox: a relay on the sandbox network's gateway.

An isolated sandbox reaches nothing but the proxy's model API, so a verifier's LLM judge (a pinned
model on some endpoint of this host or beyond) is relayed: ``JudgeRelay`` listens where sandboxes
reach this host and forwards ``POST /v1/chat/completions`` to ``judge.base_url``. A verifier is
told where and how (``FORGE_JUDGE_URL``, ``FORGE_JUDGE_API_KEY``) only in its own environment.

Invariant: the relay answers only a token issued for a rollout whose verifier is running now — the
agent's processes have all ended before it is issued, and it is revoked when the verifier ends — so
no agent can use the judge (to probe it, or to spend its budget), and only for tasks that declare
``[verifier] judge = true``. Calls through the relay are not recorded in the policy's trajectory.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import httpx
from pydantic import BaseModel, Field, field_validator

from openforgerl.verifiers.spec import http_base_url

URL_ENV, KEY_ENV = "FORGE_JUDGE_URL", "FORGE_JUDGE_API_KEY"
MAX_BODY = 4 * 1024 * 1024
PATH = "/v1/chat/completions"
_CLOSED_UNANSWERED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class JudgeSettings(BaseModel):
    """The endpoint the LLM judges of a run's verifiers are relayed to."""

    base_url: str | None = None
    """An OpenAI-compatible base URL, e.g. http://127.0.0.1:8001/v1 (unset: tasks that need a judge are
    refused before the run starts)."""
    api_key_env: str | None = None
    """The variable of this host's environment that holds the endpoint's API key, if it needs one."""
    model: str | None = None
    """When set, a verifier asking for another model is refused (403): the run's judge is pinned."""
    timeout_sec: float = Field(300.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return http_base_url(value)


class JudgeRelay:
    """A raw ASGI app: one route, token-gated, forwarding to the judge endpoint."""

    def __init__(self, settings: JudgeSettings) -> None:
        self.settings = settings
        self.tokens: set[str] = set()
        self.forwarded = 0
        # Idle connections are dropped after 3 s, before the 5 s keep-alive of the servers judges run on
        # (vLLM, uvicorn) ends them: a request sent as the server closes its connection is lost unanswered.
        self._client = httpx.AsyncClient(timeout=settings.timeout_sec, limits=httpx.Limits(keepalive_expiry=3.0))

    def issue(self) -> str:
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        return token

    def revoke(self, token: str) -> None:
        self.tokens.discard(token)

    def environment(self, url: str, token: str) -> dict[str, str]:
        """What a verifier is given: where the judge is, and its token."""
        return {URL_ENV: url + "/v1", KEY_ENV: token}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST" or scope["path"] != PATH:
            return await _reply(send, 404, {"error": {"message": f"the judge relay serves only POST {PATH}"}})
        headers = dict(scope.get("headers") or [])
        token = headers.get(b"authorization", b"").decode(errors="replace").removeprefix("Bearer ").strip()
        if token not in self.tokens:
            return await _reply(send, 401, {"error": {"message": "not a running verifier's judge token"}})
        body = await _body(receive)
        if body is None:
            return await _reply(send, 413, {"error": {"message": f"request over {MAX_BODY} bytes"}})
        await self._forward(body, send)

    async def _forward(self, body: bytes, send: Any) -> None:
        try:
            request = json.loads(body)
        except ValueError:
            return await _reply(send, 400, {"error": {"message": "the body is not JSON"}})
        pinned = self.settings.model
        if pinned and isinstance(request, dict) and request.get("model") != pinned:
            return await _reply(send, 403, {"error": {"message": f"the run's judge is {pinned!r}, "
                                                                 f"not {request.get('model')!r}"}})
        if not self.settings.base_url:
            return await _reply(send, 503, {"error": {"message": "this run has no judge (judge.base_url)"}})
        key = os.environ.get(self.settings.api_key_env, "") if self.settings.api_key_env else ""
        auth = {"authorization": f"Bearer {key}"} if key else {}
        url, headers = self.settings.base_url + "/chat/completions", {"content-type": "application/json", **auth}
        try:
            try:
                answer = await self._client.post(url, content=body, headers=headers)
            except _CLOSED_UNANSWERED:
                # A pooled connection the endpoint closed as the request went out (its keep-alive ending):
                # nothing was answered, so the request is sent once more; the pool has dropped that connection.
                answer = await self._client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return await _reply(send, 502, {"error": {"message": f"judge endpoint: {type(exc).__name__}: {exc}"}})
        self.forwarded += 1
        await _send(send, answer.status_code, answer.content)


async def _body(receive: Any) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _reply(send: Any, status: int, payload: dict[str, Any]) -> None:
    await _send(send, status, json.dumps(payload).encode())


async def _send(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
