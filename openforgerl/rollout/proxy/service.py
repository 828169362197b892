"""The one path every call takes: plan the prompt ids, generate, parse, record, answer.

Key invariant: a call's record reaches the rollout's log before the last event of its answer
(``Finish``) is handed to the dialect, so nothing a harness was answered can be lost. Calls that
end badly are recorded too: ``engine_error`` (the engine failed: a 503 for the harness) and
``client_disconnected`` (the harness went away; the engine request is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from openforgerl.errors import ProviderError
from openforgerl.log import get_logger
from openforgerl.rollout.proxy.conversation import (
    BadRequest,
    ChatRequest,
    Event,
    Finish,
    Sampling,
    TextDelta,
    ToolCallDone,
)
from openforgerl.rollout.proxy.engine import Engine
from openforgerl.rollout.proxy.lineage import Plan
from openforgerl.rollout.proxy.rollouts import Registry, Rollout
from openforgerl.rollout.proxy.template import ChatTemplate, IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import ToolParser
from openforgerl.rollout.trajectory import CallRecord

log = get_logger(__name__)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


@dataclass
class CallState:
    """What one call has produced so far (enough to record it however it ends)."""

    rollout: Rollout
    plan: Plan
    index: int
    dialect: str
    received: float
    forced: list[int] = field(default_factory=list)
    response: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""
    n_calls: int = 0
    marks: dict[str, float] = field(default_factory=dict)

    def record(self, status, error: str = "") -> CallRecord:
        plan = self.plan
        return CallRecord(
            index=self.index, status=status, kind=plan.kind,
            segment=plan.extends.segment if plan.extends is not None else -1, base=plan.base,
            prompt_suffix=plan.prompt_suffix, forced=self.forced, response=self.response,
            logprobs=self.logprobs, finish=self.finish, dialect=self.dialect,
            telemetry=self.telemetry(), head=plan.head_info(), error=error)

    def telemetry(self) -> dict[str, float]:
        m, now = self.marks, time.perf_counter()
        start, end = m.get("engine_start", now), m.get("engine_end", now)
        total = now - self.received
        return {"prep_ms": ms(m.get("prepared", now) - self.received),
                "queue_ms": ms(start - m.get("prepared", now)), "ttft_ms": ms(m.get("first", end) - start),
                "engine_ms": ms(end - start), "total_ms": ms(total),
                "overhead_ms": ms(total - (end - m.get("prepared", now))),
                "tokens_in": len(self.plan.prompt_ids), "tokens_out": len(self.response),
                "tokens_reused": self.plan.base[1] if self.plan.base else 0}


class ProxyService:
    """Serves calls for the rollouts in ``registry``."""

    def __init__(self, template: ChatTemplate, parser: ToolParser, engine: Engine, registry: Registry,
                 max_inflight: int = 0, force_tool_calls: int = 0, max_tokens: int = 0) -> None:
        self.template, self.parser, self.engine, self.registry = template, parser, engine, registry
        self.force_tool_calls = force_tool_calls
        self.max_tokens = max_tokens
        self._slots = asyncio.Semaphore(max_inflight) if max_inflight > 0 else None
        self._io = ThreadPoolExecutor(max_workers=8, thread_name_prefix="forge-wal")

    def _capped(self, sampling: Sampling) -> Sampling:
        """The harness's sampling with the proxy's response cap: the default when it sets none, the ceiling
        when it asks for more (harnesses such as Codex set none, and a rambling policy fills the context)."""
        if not self.max_tokens or (sampling.max_tokens is not None and sampling.max_tokens <= self.max_tokens):
            return sampling
        return dataclasses.replace(sampling, max_tokens=self.max_tokens)

    def prompt_tokens(self, request: ChatRequest) -> int:
        return len(self.template.encode(self.template.render(request.messages, request.tools, True)))

    def forced_ids(self, request: ChatRequest, call_index: int = 0) -> list[int]:
        if request.tools and request.tool_choice == "auto" and call_index < self.force_tool_calls:
            request.tool_choice = "required"  # the proxy's policy setting, not the harness's request
        if not request.tools or request.tool_choice in ("auto", "none"):
            return []
        name = None if request.tool_choice == "required" else request.tool_choice
        return self.template.encode(self.parser.forced_prefix(name))

    async def turn(self, rollout: Rollout, request: ChatRequest, dialect: str,
                   received: float) -> AsyncIterator[Event]:
        """The events of one call; recorded before ``Finish`` is yielded."""
        try:
            plan = rollout.lineage.plan(request.messages, request.tools, rollout.trajectory)
        except Exception as exc:  # noqa: BLE001  (the template rejects this input: the caller's 400)
            raise BadRequest(f"the chat template cannot render this conversation: {exc}") from exc
        request.prompt_tokens = len(plan.prompt_ids)
        index = rollout.begin_call()
        state = CallState(rollout, plan, index, dialect, received, forced=self.forced_ids(request, index))
        state.marks["prepared"] = time.perf_counter()
        committed = False
        try:
            events = self._generate(state, request)
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
            finish = self._finish_reason(state, request)
            await self.commit(rollout, state.record("ok"))
            committed = True
            yield Finish(finish, len(plan.prompt_ids), len(state.forced) + len(state.response))
        except ProviderError as exc:
            await self.commit(rollout, state.record("engine_error", str(exc)))
            committed = True
            raise
        finally:
            if not committed:  # cancelled or closed: the harness went away mid-call
                self._commit_now(rollout, state.record("client_disconnected", "the client disconnected"))
            rollout.lineage.release(plan)

    @staticmethod
    def _finish_reason(state: CallState, request: ChatRequest) -> Literal["stop", "length", "tool_calls"]:
        if state.n_calls and state.finish != "length":
            return "tool_calls"
        return "length" if state.finish == "length" else "stop"

    async def _generate(self, state: CallState, request: ChatRequest) -> AsyncGenerator[Event, None]:
        decoder = IncrementalDecoder(self.template)
        parser = self.parser.stream() if request.tool_choice != "none" else None

        def parse(text: str, last: bool = False) -> list[Event]:
            events: list[Event] = parser.feed(text) if parser else ([TextDelta(text)] if text else [])
            if last and parser:
                events += parser.finish()
            state.n_calls += sum(isinstance(e, ToolCallDone) for e in events)
            return events

        for event in parse(decoder.push(state.forced)):
            yield event
        async with self._slot():
            state.marks["engine_start"] = time.perf_counter()
            chunks = self.engine.stream(state.plan.prompt_ids + state.forced, self._capped(request.sampling))
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    state.marks.setdefault("first", time.perf_counter())
                    state.response += chunk.token_ids
                    state.logprobs += chunk.logprobs
                    state.finish = chunk.finish_reason or state.finish
                    for event in parse(decoder.push(chunk.token_ids)):
                        yield event
            state.marks["engine_end"] = time.perf_counter()
        for event in parse(decoder.flush(), last=True):
            yield event

    @contextlib.asynccontextmanager
    async def _slot(self):
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield

    async def write(self, rollout: Rollout, event: dict) -> None:
        """Append ``event`` to the rollout's log and fdatasync it, off the event loop."""
        if rollout.log:
            await asyncio.get_running_loop().run_in_executor(self._io, rollout.log.append, event)

    async def create_rollout(self, metadata: dict, rollout_id: str | None) -> tuple[Rollout, str]:
        rollout, token, event = self.registry.create(metadata, rollout_id)
        await self.write(rollout, event)
        return rollout, token

    async def finish_rollout(self, rollout: Rollout, reward: float | None, status: str, metadata: dict) -> None:
        async with rollout.lock:
            event = self.registry.finish_event(rollout, reward, status, metadata)
            await self.write(rollout, event)
            self.registry.finish(rollout, event)

    async def commit(self, rollout: Rollout, record: CallRecord) -> None:
        """Make ``record`` durable, then apply it; one at a time per rollout, in log order."""
        async with rollout.lock:
            self._place(rollout, record)
            await self.write(rollout, {"t": "call", **record.to_wire()})
            rollout.apply(record)

    def _commit_now(self, rollout: Rollout, record: CallRecord) -> None:
        """The same, synchronously (from a cancelled task, which cannot await)."""
        self._place(rollout, record)
        try:
            if rollout.log:
                rollout.log.append({"t": "call", **record.to_wire()})
        except Exception:  # noqa: BLE001  (recording a disconnect must not mask the cancellation)
            log.exception("could not record the disconnected call %s of %s", record.index, rollout.id)
        rollout.apply(record)

    @staticmethod
    def _place(rollout: Rollout, record: CallRecord) -> None:
        if record.status != "ok":
            record.segment = -1
        elif record.segment < 0:
            record.segment = len(rollout.trajectory.segments)

    async def aclose(self) -> None:
        await self.engine.aclose()
        self._io.shutdown(wait=True)
