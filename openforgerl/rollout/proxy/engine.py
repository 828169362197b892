"""The inference engine behind the proxy: token ids in, token ids + logprobs out.

Key invariant: what an engine returns is exactly what was sampled — ``token_ids`` include the
stop token when the turn ended on one, and ``logprobs[i]`` belongs to ``token_ids[i]``.
Engines raise ``ProviderError`` when they cannot answer; the proxy turns that into a 503.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field

from openforgerl.errors import UnknownNameError
from openforgerl.rollout.proxy.conversation import Sampling

if TYPE_CHECKING:
    from openforgerl.rollout.proxy.template import ChatTemplate
    from openforgerl.rollout.proxy.tool_parser import ToolParser

FinishReason = Literal["stop", "length", "abort"]


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@dataclass
class TokenChunk:
    """Some newly sampled tokens; ``finish_reason`` is set on the last chunk only."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason | None = None


class Engine(ABC):
    """Generates one assistant turn from prompt token ids."""

    @abstractmethod
    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        """The whole turn at once."""

    async def stream(self, prompt_ids: list[int], sampling: Sampling) -> AsyncGenerator[TokenChunk, None]:
        """Tokens as they are sampled; engines that cannot stream yield the whole turn once.
        An async generator: the proxy closes it (``aclose``) when the harness goes away mid-call."""
        generation = await self.generate(prompt_ids, sampling)
        yield TokenChunk(generation.token_ids, generation.logprobs, generation.finish_reason)

    async def context_tokens(self) -> int | None:
        """The model's context in tokens (prompt + answer), when the engine can tell; None: unknown for
        now (the proxy asks again on the next call). Never raises: an engine that is down fails its call."""
        return None

    async def aclose(self) -> None:
        """Release connections; the proxy calls it once on shutdown."""


class ScriptTurn(BaseModel):
    """One scripted assistant turn."""

    text: str = ""
    """Plain text the model 'says' (before any tool calls)."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """Calls as ``{"name": ..., "arguments": {...}}``, written in the policy's tool-call format."""


class ScriptedEngineConfig(BaseModel):
    type: Literal["scripted"] = "scripted"
    turns: list[ScriptTurn] = Field(default_factory=lambda: [ScriptTurn(text="ok")])
    """Answers given in order, cycling."""
    latency_s: float = 0.0
    """Delay before the first token (a stand-in for prefill)."""
    token_delay_s: float = 0.0
    """Delay between streamed tokens (a stand-in for decode)."""


STREAM_INTERVAL = 8
"""Default tokens per streamed chunk from vLLM (``VLLMEngineConfig.stream_interval``)."""


class VLLMEngineConfig(BaseModel):
    type: Literal["vllm"] = "vllm"
    base_url: str = Field("http://127.0.0.1:8000", pattern=r"^https?://[^/?#]+")
    """The vLLM server (without /v1): ``http://`` or ``https://``."""
    route: Literal["completions", "generate"] = "completions"
    """``completions``: /v1/completions with a token-id prompt (streams); ``generate``:
    /inference/v1/generate (token-in/token-out, whole turn; needs --enable-scale-out)."""
    model: str | None = None
    """The model name vLLM serves; asked from /v1/models when unset."""
    timeout_s: float = 600.0
    """Longest wait for one turn."""
    max_connections: int = 512
    """Connection pool size towards vLLM."""
    keepalive_s: float = Field(3.0, gt=0)
    """How long an idle connection to vLLM is kept for the next call. Below vLLM's own keep-alive (uvicorn's
    5 s, ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``): a connection the engine has just closed, picked for the next call,
    makes that call's request go out twice (``http_client.Pool`` resends a request closed unanswered, once)."""
    stream_interval: int = Field(STREAM_INTERVAL, ge=1)
    """Tokens vLLM batches into each streamed chunk (its per-request ``stream_interval``, in vLLM 0.32; the
    first and the last chunk still go out at once; a vLLM without it ignores the field). Each chunk costs the
    proxy a read, a parse and a write to the harness (~14-30 us of CPU on 2 cores, bench/results/proxy.md),
    and an engine sends one per token per sequence: at 1, a 500-token answer costs the proxy more CPU
    than the rest of the call. The harness sees the text arrive in bursts of this many tokens; time to
    the first token and to the last are unchanged. 1: a chunk per token."""


EngineConfig = Annotated[ScriptedEngineConfig | VLLMEngineConfig, Field(discriminator="type")]

ENGINES = {
    "scripted": "openforgerl.rollout.proxy.engines.scripted:ScriptedEngine",
    "vllm": "openforgerl.rollout.proxy.engines.vllm:VLLMEngine",
}


def make_engine(config: ScriptedEngineConfig | VLLMEngineConfig, template: ChatTemplate,
                tool_parser: ToolParser) -> Engine:
    path = ENGINES.get(config.type)
    if path is None:
        raise UnknownNameError("engine", config.type, list(ENGINES))
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(config, template=template, tool_parser=tool_parser)

