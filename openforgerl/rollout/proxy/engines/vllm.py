"""vLLM over HTTP, token-in/token-out: the prompt goes as ids, the answer comes back as ids.

Key invariant: nothing is re-tokenised — the ids and logprobs recorded are the ones vLLM
returns (``/v1/completions`` with a token-id prompt and ``return_token_ids``, streamed; or
``/inference/v1/generate``, whole turn). ``max_tokens`` is clamped to the context left, since
harnesses ask for far more than a small model's window holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import orjson

from openforgerl.errors import ProviderError
from openforgerl.rollout.proxy.conversation import BadRequest, ContextTooLong, Sampling
from openforgerl.rollout.proxy.engine import Engine, FinishReason, Generation, TokenChunk, VLLMEngineConfig

if TYPE_CHECKING:
    import aiohttp

FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


class VLLMEngine(Engine):
    def __init__(self, config: VLLMEngineConfig, **_: Any) -> None:
        import aiohttp  # noqa: F401  (now, not at the first call: its import takes ~0.2 s)

        self.config = config
        self.base = config.base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._model: str | None = config.model
        self._max_len: int | None = None

    async def _client(self, fresh: bool = False):
        """The pooled session; ``fresh``: one that opens a new connection for every request (a retry)."""
        if (self._fresh if fresh else self._session) is None:
            import aiohttp

            connector = aiohttp.TCPConnector(force_close=True, ttl_dns_cache=None) if fresh else aiohttp.TCPConnector(
                limit=self.config.max_connections, ttl_dns_cache=None, keepalive_timeout=self.config.keepalive_s)
            session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.config.timeout_s, sock_connect=5),
                json_serialize=lambda o: orjson.dumps(o).decode())
            if fresh:
                self._fresh = session
            else:
                self._session = session
        return self._fresh if fresh else self._session

    @contextlib.asynccontextmanager
    async def _errors(self, what: str):
        """aiohttp's exceptions -> ProviderError (engine trouble) at this boundary."""
        import aiohttp

        try:
            yield
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ProviderError(f"vLLM at {self.base} {what}: {type(exc).__name__}: {exc}",
                                fix="start it (forge serve) or pass the right --engine-url") from exc

    async def _model_info(self) -> tuple[str, int | None]:
        if self._max_len is None:
            session = await self._client()
            async with self._errors("did not list its models"), session.get(self.base + "/v1/models") as resp:
                body = await resp.read()
            card = self._card(body)
            self._model = self._model or card.get("id")
            max_len = card.get("max_model_len")
            self._max_len = max_len if isinstance(max_len, int) and max_len > 0 else 0
        return self._model or "", self._max_len or None

    def _card(self, body: bytes) -> dict[str, Any]:
        """The served model's card from a /v1/models answer (the first one if ours is not named)."""
        try:
            cards = [c for c in orjson.loads(body).get("data") or [] if isinstance(c, dict)]
        except (ValueError, AttributeError) as exc:
            raise ProviderError(f"vLLM at {self.base} answered /v1/models with no model list: {body[:200]!r}",
                                fix="check that --engine-url points at a vLLM server") from exc
        return next((c for c in cards if c.get("id") == self._model), cards[0] if cards else {})

    async def context_tokens(self) -> int | None:
        """``max_model_len`` from vLLM's model card (asked once; again after a failure)."""
        try:
            return (await self._model_info())[1]
        except ProviderError:
            return None

    async def _params(self, prompt_ids: list[int], sampling: Sampling) -> tuple[str, dict[str, Any]]:
        model, max_len = await self._model_info()
        room = max_len - len(prompt_ids) if max_len else None
        if room is not None and max_len and room <= 0:  # the proxy checks first; this is the backstop
            raise ContextTooLong(len(prompt_ids), max_len)
        max_tokens = min(x for x in (sampling.max_tokens, room) if x is not None) if (
            sampling.max_tokens or room) else None
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "top_k": sampling.top_k, "seed": sampling.seed,
                                  "stop": sampling.stop or None, "logprobs": 0}
        return model, {k: v for k, v in params.items() if v is not None}

    async def _post(self, path: str, body: dict[str, Any]):
        """POST a turn; sent once more on a fresh connection when the engine closed the pooled one as the
        request went out (its keep-alive ran out at that moment: nothing of the answer came, so the engine
        never took the turn). A refused connection, a timeout or a second failure is the engine's trouble."""
        import aiohttp

        session = await self._client()
        data = orjson.dumps(body)
        try:
            resp = await session.post(self.base + path, data=data, headers={"content-type": "application/json"})
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            fresh = await self._client(fresh=True)
            resp = await fresh.post(self.base + path, data=data, headers={"content-type": "application/json"})
        if resp.status >= 400:
            text = (await resp.read()).decode(errors="replace")[:500]
            resp.release()
            if resp.status in (400, 413, 422):
                raise BadRequest(f"the engine refused the request: {text}")
            raise ProviderError(f"vLLM at {self.base}{path} answered {resp.status}: {text}")
        return resp

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        if self.config.route == "completions":
            ids: list[int] = []
            logprobs: list[float] = []
            finish: FinishReason = "stop"
            async for chunk in self.stream(prompt_ids, sampling):
                ids += chunk.token_ids
                logprobs += chunk.logprobs
                finish = chunk.finish_reason or finish
            return Generation(ids, logprobs, finish)
        model, params = await self._params(prompt_ids, sampling)
        async with self._errors("failed to generate"):
            resp = await self._post("/inference/v1/generate",
                                    {"model": model, "token_ids": prompt_ids, "sampling_params": params})
            async with resp:
                choice = orjson.loads(await resp.read())["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        return Generation(choice["token_ids"], [e["logprob"] for e in content],
                          FINISH.get(choice.get("finish_reason"), "stop"))

    async def stream(self, prompt_ids: list[int], sampling: Sampling) -> AsyncGenerator[TokenChunk, None]:
        if self.config.route != "completions":
            yield TokenChunk(*(lambda g: (g.token_ids, g.logprobs, g.finish_reason))(
                await self.generate(prompt_ids, sampling)))
            return
        model, params = await self._params(prompt_ids, sampling)
        body = {"model": model, "prompt": prompt_ids, "stream": True, "return_token_ids": True, **params}
        if self.config.stream_interval > 1:  # tokens per chunk: the proxy's work is per chunk
            body["stream_interval"] = self.config.stream_interval
        async with self._errors("failed to stream"):
            resp = await self._post("/v1/completions", body)
            async with resp:
                pending = b""
                async for data in resp.content.iter_any():  # everything that has arrived: under load
                    lines = (pending + data).split(b"\n")  # several tokens go out as one chunk
                    pending = lines.pop()
                    chunk = self._merge(lines)
                    if chunk is not None:
                        yield chunk

    @classmethod
    def _merge(cls, lines: list[bytes]) -> TokenChunk | None:
        merged: TokenChunk | None = None
        for line in lines:
            chunk = cls._chunk(line.strip())
            if chunk is None:
                continue
            if merged is None:
                merged = chunk
            else:
                merged.token_ids += chunk.token_ids
                merged.logprobs += chunk.logprobs
                merged.finish_reason = chunk.finish_reason or merged.finish_reason
        return merged

    @staticmethod
    def _chunk(line: bytes) -> TokenChunk | None:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            return None
        data = orjson.loads(line[6:])
        if "error" in data:
            raise ProviderError(f"vLLM stream error: {data['error']}")
        choice = data["choices"][0]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        finish = choice.get("finish_reason")
        return TokenChunk(choice.get("token_ids") or [], [float(x) for x in logprobs],
                          FINISH.get(finish, "stop") if finish else None)

    async def aclose(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None
