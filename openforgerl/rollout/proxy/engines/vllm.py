"""vLLM over HTTP, token-in/token-out: the prompt goes as ids, the answer comes back as ids.

Key invariant: nothing is re-tokenised — the ids and logprobs recorded are the ones vLLM
returns (``/v1/completions`` with a token-id prompt and ``return_token_ids``, streamed; or
``/inference/v1/generate``, whole turn). ``max_tokens`` is clamped to the context left, since
harnesses ask for far more than a small model's window holds.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from openforgerl.errors import ProviderError
from openforgerl.processes import open_files_limit
from openforgerl.rollout.proxy.conversation import BadRequest, ContextTooLong, Sampling
from openforgerl.rollout.proxy.engine import Engine, FinishReason, Generation, TokenChunk, VLLMEngineConfig
from openforgerl.rollout.proxy.http_client import Pool, Response

FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


class VLLMEngine(Engine):
    def __init__(self, config: VLLMEngineConfig, **_: Any) -> None:
        self.config = config
        self.base = config.base_url.rstrip("/")
        self._pool: Pool | None = None
        self._model: str | None = config.model
        self._max_len: int | None = None

    def _client(self) -> Pool:
        if self._pool is None:  # made on the event loop that serves: it waits on that loop
            self._pool = Pool(self.base, max_connections=self.config.max_connections,
                              keepalive_s=self.config.keepalive_s, timeout_s=self.config.timeout_s)
        return self._pool

    @contextlib.asynccontextmanager
    async def _errors(self, what: str):
        """The client's exceptions -> ProviderError (engine trouble) at this boundary."""
        try:
            yield
        except (TimeoutError, OSError) as exc:  # ServerDisconnected and BadResponse are ConnectionErrors
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):  # this side's trouble
                raise ProviderError(f"the proxy could not connect to vLLM at {self.base}: it is out of file "
                                    f"descriptors (ulimit -n {open_files_limit()})",
                                    fix="raise the proxy's limit of open files, or spread the rollouts over more "
                                        "proxy workers") from exc
            raise ProviderError(f"vLLM at {self.base} {what}: {type(exc).__name__}: {exc}",
                                fix="start it (forge serve) or pass the right --engine-url") from exc

    async def _model_info(self) -> tuple[str, int | None]:
        if self._max_len is None:
            async with self._errors("did not list its models"):
                async with await self._client().request("GET", "/v1/models") as resp:
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

    async def _post(self, path: str, body: dict[str, Any]) -> Response:
        """POST a turn. A turn the engine's connection closed on before any answer (its keep-alive ran out as
        the request went out: the engine never took it) is sent once more on a new connection (``Pool``); a
        refused connection, a timeout or a second close is the engine's trouble."""
        resp = await self._client().request("POST", path, orjson.dumps(body))
        if resp.status >= 400:
            try:
                text = (await resp.read()).decode(errors="replace")[:500]
            finally:
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
                async for data in resp:  # everything that has arrived: under load
                    lines = (pending + data).split(b"\n")  # several tokens go out as one chunk
                    pending = lines.pop()
                    chunk = self._merge(lines)
                    if chunk is None:
                        continue
                    if chunk.finish_reason is not None:  # the last token: the call goes on without the
                        resp.drain()                     # answer's end ([DONE]), read off its path
                        yield chunk
                        return
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
        if self._pool is not None:
            await self._pool.aclose()
        self._pool = None
