"""The proxy's HTTP surface: a raw ASGI app (no framework) — model routes, admin routes, errors.

Key invariant: bad input never produces a 5xx — every refusal is a 4xx in the caller's dialect
(400 malformed or over the context, 401 token, 404 model/route, 409 conflict, 413 size, 415 content
type), checked before a stream starts; 503 means the engine failed, 507 that the disk is full (503
for other storage trouble). A client that disconnects mid-answer cancels its engine request and is
recorded. Whatever else goes wrong is a logged 500 in the caller's dialect, never a cut-off body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from openforgerl.errors import ProviderError, ProxyError
from openforgerl.log import get_logger
from openforgerl.rollout.proxy.conversation import (
    MAX_JSON_DEPTH,
    BadRequest,
    ChatRequest,
    ContextTooLong,
    Event,
    Finish,
    nesting_exceeds,
    shown,
)
from openforgerl.rollout.proxy.dialect import Dialect, Reply, collect, make_dialect
from openforgerl.rollout.proxy.rollouts import ROLLOUT_ID_PREFIX, Rollout, check_rollout_id, token_shard
from openforgerl.rollout.proxy.service import ProxyService
from openforgerl.rollout.proxy.store import StorageError

log = get_logger(__name__)
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
DIALECT_ROUTES = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
COUNT_TOKENS = "/v1/messages/count_tokens"
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client hung up before its request was read."""


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> None:
        self.status, self.message, self.kind, self.code = status, message, kind, code
        super().__init__(message)


def http_error(dialect: Dialect | None, exc: Exception) -> HttpError:
    """The answer to an error the call path raised, worded for ``dialect`` where that matters."""
    if isinstance(exc, ContextTooLong):
        message = (dialect.too_long(exc.tokens, exc.limit, exc.at_least) if dialect else exc.what)
        return HttpError(400, message, "invalid_request_error", "context_length_exceeded")
    if isinstance(exc, BadRequest):
        return HttpError(exc.status, exc.what, exc.kind)
    if isinstance(exc, StorageError):  # harnesses see why, not the proxy's paths; the admin API sees all
        message = f"the proxy cannot record this call: {exc.reason}; retry later" if dialect else str(exc)
        return HttpError(exc.status, message, "server_error")
    if isinstance(exc, ProviderError):
        return HttpError(503, f"the inference engine failed: {exc}", "server_error")
    raise exc


async def send_json(send: Send, status: int, body: Any) -> None:
    data = orjson.dumps(body)
    await send({"type": "http.response.start", "status": status,
                "headers": JSON_HEADERS + [(b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def read_body(receive: Receive, headers: dict[bytes, bytes], limit: int) -> bytes:
    declared = headers.get(b"content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"request body of {int(declared)} bytes exceeds the limit of {limit}",
                        "request_too_large")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"request body exceeds the limit of {limit} bytes", "request_too_large")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def parse_json(headers: dict[bytes, bytes], body: bytes) -> Any:
    content_type = headers.get(b"content-type", b"application/json").split(b";")[0].strip().lower()
    if content_type != b"application/json" and not content_type.endswith(b"+json"):
        raise HttpError(415, f"content-type must be application/json, not {content_type.decode('latin-1')!r}")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None


def api_key(headers: dict[bytes, bytes]) -> str | None:
    auth = headers.get(b"authorization", b"")
    if auth[:7].lower() == b"bearer ":
        return auth[7:].strip().decode("latin-1")
    key = headers.get(b"x-api-key")
    return key.decode("latin-1").strip() if key else None


def is_model_route(path: str) -> bool:
    """Whether ``path`` is part of the model API (what harnesses call), not admin or health."""
    path = path.rstrip("/") or "/"
    return path.startswith("/v1/") or "/v1" + path in DIALECT_ROUTES


class ModelApi:
    """The proxy as sandboxes see it: the model routes only. Admin and health routes do not exist
    here (404), so a listener sandboxes can reach never exposes them, whatever token is sent."""

    def __init__(self, app: ProxyApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not is_model_route(scope["path"]):
            return await send_json(send, 404, {"error": {"message": "not found", "type": "not_found_error"}})
        await self.app(scope, receive, send)


class ProxyApp:
    """ASGI entry point."""

    def __init__(self, service: ProxyService, *, admin_token: str, model: str, unknown_model: str = "serve",
                 max_body_bytes: int = 32 * 1024 * 1024, shard: int = 0, shard_map: Path | None = None) -> None:
        self.service, self.registry = service, service.registry
        self.shard, self.shard_map = shard, shard_map
        self.admin_token, self.model = admin_token, model
        self.unknown_model, self.max_body_bytes = unknown_model, max_body_bytes
        self.dialects: dict[str, Dialect] = {name: make_dialect(name) for name in set(DIALECT_ROUTES.values())}

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.service.aclose()
                self.registry.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        received = time.perf_counter()
        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        if not path.startswith("/v1/") and "/v1" + path in DIALECT_ROUTES:
            path = "/v1" + path
        headers = dict(scope["headers"])
        dialect = self.dialects.get(DIALECT_ROUTES.get("/v1/messages" if path == COUNT_TOKENS else path, ""))
        started = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)
        try:
            if dialect is not None and method == "POST" and path != COUNT_TOKENS:
                await self._model_call(dialect, headers, receive, tracked, received)
            elif path == COUNT_TOKENS and method == "POST":
                await self._count_tokens(headers, receive, tracked)
            else:
                await self._other(method, path, headers, receive, tracked)
        except HttpError as exc:
            await send_json(send, exc.status, error_body(dialect, exc))
        except ClientGone:
            return
        except Exception:  # a bug, not the client's doing: logged, and still an answer in the caller's shape
            log.exception("%s %s failed", method, path)
            if not started:
                await send_json(send, 500, error_body(dialect, HttpError(500, "the proxy failed on this request "
                                                                        "(see its log)", "server_error")))

    # -- model calls ---------------------------------------------------------------------------

    def _parse(self, dialect: Dialect, data: Any) -> ChatRequest:
        if not isinstance(data, dict):
            raise HttpError(400, "the body must be a JSON object")
        try:
            request = dialect.parse(data)
        except BadRequest as exc:
            raise HttpError(exc.status, exc.what, exc.kind) from None
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            raise HttpError(400, f"malformed request: {type(exc).__name__}: {exc}") from None
        if self.unknown_model == "reject" and request.model and request.model != self.model:
            raise HttpError(404, f"model {request.model!r} is not served here; use {self.model!r}",
                            "not_found_error")
        return request

    def _caller(self, headers: dict[bytes, bytes]) -> Rollout:
        key = api_key(headers)
        rollout = self.registry.by_api_key(key)
        owner = token_shard(key) if rollout is None else None
        if owner is not None and owner != self.shard:
            raise HttpError(421, f"this token belongs to shard {owner} of the proxy, not to shard {self.shard}: "
                                 f"send its calls to {self.shard_url(owner)}", "misdirected_request")
        if rollout is None:
            raise HttpError(401, "unknown or finished rollout token; use the token POST /rollouts returned",
                            "authentication_error")
        return rollout

    async def _model_call(self, dialect: Dialect, headers, receive: Receive, send: Send, received: float) -> None:
        body = await read_body(receive, headers, self.max_body_bytes)
        rollout = self._caller(headers)
        request = self._parse(dialect, parse_json(headers, body))
        batches = self.service.turn(rollout, request, dialect.name, received)
        await guarded(receive, self._answer(dialect, request, rollout, batches, send))

    async def _answer(self, dialect: Dialect, request: ChatRequest, rollout: Rollout,
                      batches: AsyncGenerator[list[Event], None], send: Send) -> None:
        async with contextlib.aclosing(batches):
            try:  # planning, context check and the engine's first tokens: every refusal comes before a stream
                first = await anext(batches)
            except (BadRequest, StorageError, ProviderError) as exc:
                raise http_error(dialect, exc) from None
            reply = Reply(id=dialect.id_prefix + rollout.id.removeprefix(ROLLOUT_ID_PREFIX) + f"-{request.call}",
                          model=request.model or self.model)
            if not request.stream:
                try:
                    turn = await collect(flushing(first, batches, None))
                except (BadRequest, StorageError, ProviderError) as exc:
                    raise http_error(dialect, exc) from None
                await send_json(send, 200, dialect.render(turn, request, reply))
                return
            await self._stream(dialect, request, reply, first, batches, send)

    async def _stream(self, dialect: Dialect, request: ChatRequest, reply: Reply, first: list[Event],
                      batches: AsyncIterator[list[Event]], send: Send) -> None:
        pending: list[bytes] = []
        started = False

        async def start() -> None:  # the head goes out with the first events, back to back: the harness
            nonlocal started        # wakes for both at once (the server writes each message as it comes)
            if not started:
                started = True
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

        async def flush() -> None:  # one write per batch of events, sent before waiting for more
            if pending:
                body = b"".join(pending)
                pending.clear()
                await start()
                await send({"type": "http.response.body", "body": body, "more_body": True})

        try:
            async for chunk in dialect.stream(flushing(first, batches, flush), request, reply):
                pending.append(chunk)
        except (BadRequest, StorageError, ProviderError) as exc:  # after the stream started: its error event
            error = http_error(dialect, exc)
            pending.append(dialect.stream_error(error.status, error.message, error.kind))
        except Exception:  # noqa: BLE001  (a bug: logged; the stream still ends as the dialect ends one)
            log.exception("streaming %s failed", reply.id)
            pending.append(dialect.stream_error(500, "the proxy failed on this call (see its log)", "server_error"))
        await start()
        await send({"type": "http.response.body", "body": b"".join(pending)})

    async def _count_tokens(self, headers, receive: Receive, send: Send) -> None:
        dialect = self.dialects["messages"]
        body = await read_body(receive, headers, self.max_body_bytes)
        rollout = self._caller(headers)
        data = parse_json(headers, body)
        if isinstance(data, dict) and "max_tokens" not in data:
            data = dict(data, max_tokens=1)  # count_tokens bodies need none; parse them as a call would
        request = self._parse(dialect, data)
        try:
            tokens = await self.service.count_tokens(request, rollout)
        except BadRequest as exc:
            raise http_error(dialect, exc) from None
        await send_json(send, 200, {"input_tokens": tokens})

    def shard_url(self, shard: int) -> str:
        """Shard ``shard``'s model API as the shard map lists it (every listener it has)."""
        try:
            entry = orjson.loads(self.shard_map.read_bytes())["shards"][shard] if self.shard_map else None
        except (OSError, orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            entry = None
        if not isinstance(entry, dict):
            return f"the base URL POST /rollouts returned with this token (shard {shard})"
        urls = [entry.get("base_url"), *(entry.get("model_urls") or {}).values()]
        return " or ".join(str(url) for url in urls if url)

    # -- admin and info ------------------------------------------------------------------------

    async def _other(self, method: str, path: str, headers, receive: Receive, send: Send) -> None:
        if method == "GET" and path == "/health":
            return await send_json(send, 200, {
                "status": "ok", "model": self.model, "shard": self.shard,
                "rollouts": len(self.registry.by_id) + len(self.registry.retired),
                "live": sum(1 for r in self.registry.by_id.values() if r.open),
                "inflight": sum(len(r.in_flight) for r in self.registry.by_id.values())})
        if method == "GET" and path == "/v1/models":
            return await send_json(send, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "type": "model", "created": 0,
                 "owned_by": "openforgerl", "display_name": self.model}]})
        if path == "/rollouts" or path.startswith("/rollouts/"):
            return await self._admin(method, path, headers, receive, send)
        raise HttpError(404, f"no route {method} {shown(path)}", "not_found_error")

    async def _admin(self, method: str, path: str, headers, receive: Receive, send: Send) -> None:
        if not hmac.compare_digest((api_key(headers) or "").encode(), self.admin_token.encode()):
            raise HttpError(401, "admin routes need the admin token as a Bearer token", "authentication_error")
        parts = path.split("/")[1:]
        if method == "POST" and parts == ["rollouts"]:
            return await self._create(await self._admin_body(headers, receive), send)
        if method == "GET" and parts == ["rollouts"]:
            return await send_json(send, 200, {"rollouts": self.registry.summaries()})
        try:
            rollout = self.registry.get(parts[1]) if len(parts) == 3 else None
        except StorageError as exc:
            raise http_error(None, exc) from None
        if rollout is None:
            raise HttpError(404, f"no route {method} {shown(path)} (or no such rollout)", "not_found_error")
        if method == "POST" and parts[2] == "finish":
            await self._finish(rollout, await self._admin_body(headers, receive), send)
        elif method == "GET" and parts[2] == "trajectory":
            await send_json(send, 200, rollout.trajectory.to_dict())
        else:
            raise HttpError(404, f"no route {method} {shown(path)}", "not_found_error")

    async def _admin_body(self, headers, receive: Receive) -> dict[str, Any]:
        """The body as an object; the proxy writes it back out (log, answers), so its nesting is bounded."""
        body = await read_body(receive, headers, self.max_body_bytes)
        data = parse_json(headers, body) if body.strip() else {}
        if not isinstance(data, dict):
            raise HttpError(400, "the body must be a JSON object")
        if nesting_exceeds(data, MAX_JSON_DEPTH):
            raise HttpError(400, f"the body nests lists/objects more than {MAX_JSON_DEPTH} levels deep")
        return data

    async def _create(self, data: dict[str, Any], send: Send) -> None:
        metadata = object_field(data, "metadata")
        try:
            rollout_id = None if data.get("id") is None else check_rollout_id(data["id"])
            created, token = await self.service.create_rollout(metadata, rollout_id)
        except BadRequest as exc:
            raise HttpError(400, exc.what) from None
        except StorageError as exc:
            raise http_error(None, exc) from None
        except ProxyError as exc:
            raise HttpError(409, str(exc), "conflict") from None
        await send_json(send, 200, {"id": created.id, "token": token})

    async def _finish(self, rollout, data: dict[str, Any], send: Send) -> None:
        reward = data.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            raise HttpError(400, "reward must be a number or null")
        status, metadata = data.get("status", "completed"), object_field(data, "metadata")
        if not isinstance(status, str):
            raise HttpError(400, "status must be a string")
        try:
            await self.service.finish_rollout(rollout, reward, status, metadata)
        except StorageError as exc:  # the rollout stays open: the same finish can be sent again
            raise http_error(None, exc) from None
        except ProxyError as exc:
            raise HttpError(409, str(exc), "conflict") from None
        await send_json(send, 200, rollout.trajectory.summary())


def object_field(data: dict[str, Any], name: str) -> dict[str, Any]:
    """``data[name]`` as an object: missing or null is empty, anything else but an object a 400."""
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HttpError(400, f"{name} must be an object")
    return value


def error_body(dialect: Dialect | None, exc: HttpError) -> dict[str, Any]:
    if dialect is not None:
        return dialect.error(exc.status, exc.message, exc.kind, exc.code)
    return {"error": {"message": exc.message, "type": exc.kind}}


async def flushing(first: list[Event], rest: AsyncIterator[list[Event]],
                   flush: Callable[[], Awaitable[None]] | None) -> AsyncIterator[Event]:
    """The events of ``first``, then of each batch in ``rest``, calling ``flush`` after each batch (once the
    dialect has turned its last event into bytes), except after the one that ends with ``Finish``: the end of
    the stream follows it at once, and goes out in the same write."""
    batch: list[Event] | None = first
    while batch is not None:
        for event in batch:
            yield event
        if flush is not None and not (batch and isinstance(batch[-1], Finish)):
            await flush()
        batch = await anext(rest, None)


async def guarded(receive: Receive, answer: Awaitable[None]) -> None:
    """Run ``answer`` in this task; if the client disconnects first, cancel it (which records the call).
    The disconnect is heard by a callback on a ``receive`` running beside it: one task per call, not three
    (a task for the answer and ``asyncio.wait`` over both cost ~15 us a call)."""
    task = asyncio.current_task()
    assert task is not None
    gone = over = False

    def heard(watcher: asyncio.Future[dict[str, Any]]) -> None:
        nonlocal gone
        if watcher.cancelled() or watcher.exception() is not None or over:  # (the exception: seen, not logged)
            return
        if watcher.result().get("type") == "http.disconnect":
            gone = True
            task.cancel()

    watcher = asyncio.ensure_future(receive())
    watcher.add_done_callback(heard)
    try:
        await answer
    except asyncio.CancelledError:
        if not gone:  # not ours: the server is stopping
            raise
        task.uncancel()  # the client went away; the cancelled answer recorded the call
    finally:
        over = True
        watcher.cancel()
