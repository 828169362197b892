"""An engine that answers from a script, tokenised with the policy's real tokenizer.

Key invariant: deterministic — the same script gives the same token ids and logprobs, so tests
can assert exact trajectories. Used by tests, ``forge proxy --engine scripted`` and the benchmark.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator, Callable

from openforgerl.rollout.proxy.conversation import Sampling, ToolCall
from openforgerl.rollout.proxy.engine import (
    Engine,
    FinishReason,
    Generation,
    ScriptedEngineConfig,
    ScriptTurn,
    TokenChunk,
)
from openforgerl.rollout.proxy.template import ChatTemplate
from openforgerl.rollout.proxy.tool_parser import ToolParser


def fake_logprob(token_id: int, position: int) -> float:
    """A deterministic, plausible-looking logprob in (-1, 0)."""
    return -((token_id * 7919 + position * 104729) % 997 + 1) / 1000.0


def already_said(prompt_ids: list[int], answer_ids: list[int], longest: int = 32) -> int:
    """How many leading ids of the scripted answer the prompt already ends with (at least 2, else 0).

    The proxy forces a tool call by putting its opening (``<tool_call>``) at the end of the prompt;
    a real model continues after it, so the script must too instead of repeating it.
    """
    for k in range(min(longest, len(prompt_ids), len(answer_ids)), 1, -1):
        if prompt_ids[-k:] == answer_ids[:k]:
            return k
    return 0


class ScriptedEngine(Engine):
    def __init__(self, config: ScriptedEngineConfig, *, template: ChatTemplate, tool_parser: ToolParser,
                 respond: Callable[[list[int]], ScriptTurn] | None = None) -> None:
        self.config = config
        self.template = template
        self.tool_parser = tool_parser
        self._turns = itertools.cycle(config.turns)
        self._respond = respond
        self.prompts: list[list[int]] = []  # every prompt seen, for tests

    def turn_ids(self, turn: ScriptTurn) -> list[int]:
        calls = [ToolCall(id="", name=c["name"], arguments=json.dumps(c.get("arguments", {})))
                 for c in turn.tool_calls]
        text = turn.text + ("\n" if turn.text and calls else "") + self.tool_parser.format(calls)
        stop = min(self.template.stop_ids) if self.template.stop_ids else None
        return self.template.encode(text) + ([stop] if stop is not None else [])

    def _next(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        self.prompts.append(list(prompt_ids))
        turn = self._respond(prompt_ids) if self._respond else next(self._turns)
        ids = self.turn_ids(turn)
        ids = ids[already_said(prompt_ids, ids):]
        finish: FinishReason = "stop"
        if sampling.max_tokens is not None and len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        logprobs = [fake_logprob(t, i) for i, t in enumerate(ids)]
        return Generation(ids, logprobs, finish)

    async def generate(self, prompt_ids, sampling):
        generation = self._next(prompt_ids, sampling)
        await asyncio.sleep(self.config.latency_s + self.config.token_delay_s * len(generation.token_ids))
        return generation

    async def stream(self, prompt_ids, sampling) -> AsyncGenerator[TokenChunk, None]:
        generation = self._next(prompt_ids, sampling)
        if self.config.latency_s:
            await asyncio.sleep(self.config.latency_s)
        last = len(generation.token_ids) - 1
        for i, (tid, lp) in enumerate(zip(generation.token_ids, generation.logprobs, strict=True)):
            if i and self.config.token_delay_s:
                await asyncio.sleep(self.config.token_delay_s)
            yield TokenChunk([tid], [lp], generation.finish_reason if i == last else None)
        if last < 0:
            yield TokenChunk([], [], generation.finish_reason)
