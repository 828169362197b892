"""veRL's rollout servers as the proxy's engine: ``server_manager.generate`` called in-process.

veRL owns the inference servers while it trains; its agent-loop workers hold a client object whose
``generate(request_id, *, prompt_ids, sampling_params)`` answers one whole turn (a Ray call, not
HTTP). ``VerlEngine`` wraps such an object for a proxy that runs inside the same worker process
(``openforgerl.train.verl.agent_loop`` builds one proxy per rollout with it: an object cannot be
named in a config file, so this engine has no ``type`` in ``engine.ENGINES``).

Key invariant: every call of one rollout goes out under the same ``request_id`` (veRL's load
balancer keeps a request id on one replica: prefix-cache hits), always with an explicit
``max_tokens`` (veRL's default would be ``response_length``, not what is left of the context), and
with the trainer's sampling settings, never the harness's: the trainer recomputes log-probs at the
rollout temperature, so a harness that asked for another temperature would corrupt them.
veRL reports ``completed`` for both a stop and a length cut; the finish reason is derived here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from openforgerl.errors import ProviderError
from openforgerl.rollout.proxy.conversation import ContextTooLong, Sampling
from openforgerl.rollout.proxy.engine import Engine, FinishReason, Generation

TRAINER_SAMPLING = ("temperature", "top_p", "top_k", "repetition_penalty")
"""The sampling keys the trainer decides (veRL's agent-loop worker passes them to ``run``)."""


class TokenClient(Protocol):
    """What veRL's ``LLMServerClient`` offers (0.8+): one whole turn, token ids in and out."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        """A ``TokenOutput``: ``token_ids``, ``log_probs`` (None unless asked), ``stop_reason``,
        ``num_preempted``, ``extra_fields`` (``global_steps``, ``min_global_steps``, ...)."""


@dataclass
class CallStats:
    """What veRL said about the calls of one rollout beyond the tokens (for the training rows)."""

    calls: int = 0
    preempted: int = 0
    min_global_steps: int | None = None
    max_global_steps: int | None = None
    extra: list[dict[str, Any]] = field(default_factory=list)
    """Each call's ``TokenOutput.extra_fields``, in call order."""

    def add(self, output: Any) -> None:
        self.calls += 1
        self.preempted += max(0, getattr(output, "num_preempted", None) or 0)
        extra = dict(getattr(output, "extra_fields", None) or {})
        self.extra.append(extra)
        low, high = extra.get("min_global_steps"), extra.get("max_global_steps")
        if isinstance(low, int):
            self.min_global_steps = low if self.min_global_steps is None else min(self.min_global_steps, low)
        if isinstance(high, int):
            self.max_global_steps = high if self.max_global_steps is None else max(self.max_global_steps, high)


class VerlEngine(Engine):
    """One rollout's engine: ``client.generate`` under ``request_id``, with the trainer's sampling."""

    def __init__(self, client: TokenClient, *, sampling_params: Mapping[str, Any], stop_ids: frozenset[int],
                 response_length: int, context_tokens: int | None = None, request_id: str = "") -> None:
        self.client = client
        self.sampling = {k: v for k, v in sampling_params.items() if k in TRAINER_SAMPLING}
        self.want_logprobs = bool(sampling_params.get("logprobs", True))
        self.stop_ids = stop_ids
        self.response_length = response_length
        """The most tokens one call may sample (veRL's ``rollout.response_length``)."""
        self.context = context_tokens
        """Prompt + answer of one call at most; None: only veRL's server checks."""
        self.request_id = request_id
        """Set once the proxy has made the rollout (its id); every call is routed under it."""
        self.stats = CallStats()

    async def context_tokens(self) -> int | None:
        return self.context

    def max_tokens(self, prompt_ids: list[int], sampling: Sampling) -> int:
        """The harness's cap within ``response_length`` and within the context that is left."""
        wanted = min(sampling.max_tokens or self.response_length, self.response_length)
        if self.context is None:
            return max(1, wanted)
        room = self.context - len(prompt_ids)
        if room <= 0:  # the proxy refuses such prompts first; this is the backstop
            raise ContextTooLong(len(prompt_ids), self.context)
        return max(1, min(wanted, room))

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        if not self.request_id:
            raise ProviderError("the veRL engine was asked to generate before its rollout was created")
        max_tokens = self.max_tokens(prompt_ids, sampling)
        params = {**self.sampling, "logprobs": self.want_logprobs, "max_tokens": max_tokens}
        try:
            output = await self.client.generate(self.request_id, prompt_ids=list(prompt_ids), sampling_params=params)
        except Exception as exc:  # a Ray actor error, a dead replica: the proxy records an engine error
            raise ProviderError(f"veRL's rollout server failed: {type(exc).__name__}: {exc}") from exc
        self.stats.add(output)
        ids = list(output.token_ids)
        logprobs = [float(x) for x in output.log_probs] if output.log_probs is not None else [0.0] * len(ids)
        if len(logprobs) != len(ids):
            raise ProviderError(f"veRL returned {len(ids)} tokens with {len(logprobs)} log-probs")
        return Generation(ids, logprobs, self.finish_reason(ids, max_tokens, output.stop_reason))

    def finish_reason(self, ids: list[int], max_tokens: int, stop_reason: str | None) -> FinishReason:
        """veRL says ``completed`` for a stop and for a length cut alike; the tokens tell them apart."""
        if stop_reason == "aborted":
            return "abort"
        if ids and ids[-1] in self.stop_ids:
            return "stop"
        return "length" if len(ids) >= max_tokens else "stop"
