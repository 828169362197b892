"""The one path every call takes: plan the prompt ids, generate, parse, record, answer.

Key invariant: a call's record reaches the rollout's log before the last event of its answer
(``Finish``) is handed to the dialect, so nothing a harness was answered can be lost. Calls that
end badly are recorded too: ``engine_error`` (the engine failed: a 503; or refused the call: a 400,
recorded without its prompt) and ``client_disconnected`` (the harness went away; the engine request
is cancelled). A call whose record cannot be written (disk full) is answered with a storage error
and kept in memory as ``interrupted``, which is what recovery will find in the log.

Planning (render + tokenise) runs in worker threads, so one huge prompt never stalls the event loop;
a rollout's calls are planned one at a time, in arrival order, each against the lineage the ones
before it left. Prompts that do not fit the model's context are refused before they are tokenised
in full (``lineage.draft``) and before anything is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from openforgerl.errors import ProviderError
from openforgerl.log import get_logger
from openforgerl.rollout.proxy.conversation import (
    BadRequest,
    ChatRequest,
    Event,
    Finish,
    Sampling,
    TextDelta,
    ToolCall,
    ToolCallDone,
)
from openforgerl.rollout.proxy.digest import call_digest, request_digest
from openforgerl.rollout.proxy.engine import Engine
from openforgerl.rollout.proxy.lineage import Head, Plan, check_fits
from openforgerl.rollout.proxy.rollouts import Registry, Rollout
from openforgerl.rollout.proxy.store import StorageError
from openforgerl.rollout.proxy.template import ChatTemplate, IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import ToolParser, kept_markers
from openforgerl.rollout.trajectory import CallRecord

log = get_logger(__name__)
T = TypeVar("T")
PLAN_WORKERS = 8
"""Calls planned at once (across rollouts): one huge prompt occupies one worker, the others go on."""
INLINE_DRAFT_S = 0.001
INLINE_NEW_CHARS = 4096
"""A call is drafted on the event loop, not in a worker thread, when the rollout's last draft took under
``INLINE_DRAFT_S`` and its messages' size changed by at most ``INLINE_NEW_CHARS`` characters: with the render
and token caches warm such a draft costs ~0.2 ms, about what the hop to a thread and back costs (measured on
the 21 kB agent body). Anything else (a first call, a big new tool output, a compacted history, a cold cache)
goes to a worker, so a long render never stalls the other streams."""


def message_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of text in ``messages`` (contents and tool-call arguments): a cheap size estimate."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(str(part.get("text") or "")) for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or ():
            total += len(str((call.get("function") or {}).get("arguments") or ""))
    return total


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500] or type(exc).__name__


def retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a shielded task's outcome as seen: its caller may have been cancelled and never look."""
    if not task.cancelled():
        task.exception()


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
    request: ChatRequest | None = None
    calls: list[ToolCall] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    asked: dict[str, Any] | None = None  # request_digest(request), worked out while the engine answers

    def describe_request(self) -> None:
        if self.request is not None and self.asked is None:
            self.asked = request_digest(self.request)

    def record(self, status, error: str = "", keep_prompt: bool = True) -> CallRecord:
        plan = self.plan
        return CallRecord(
            index=self.index, status=status, kind=plan.kind,
            segment=plan.extends.segment if plan.extends is not None else -1, base=plan.base,
            prompt_suffix=plan.prompt_suffix if keep_prompt else [], forced=self.forced, response=self.response,
            logprobs=self.logprobs, finish=self.finish, dialect=self.dialect,
            telemetry=self.telemetry(), head=plan.head_info(), error=error,
            digest=call_digest(self.request, self.calls, "".join(self.text), self.asked) if self.request else None)

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


@dataclasses.dataclass(frozen=True)
class Budget:
    """What one rollout may spend on the model (0: unlimited)."""

    tokens: int = 0
    """Generated tokens, over all its calls."""
    calls: int = 0

    def spent(self, rollout: Rollout) -> str | None:
        """Why no further call of ``rollout`` may reach the engine, else None."""
        if self.calls and rollout.next_call >= self.calls:
            return f"its call budget is spent ({self.calls} calls)"
        if self.tokens and rollout.generated >= self.tokens:
            return f"its token budget is spent ({rollout.generated} of {self.tokens} tokens generated)"
        return None

    def left(self, rollout: Rollout) -> int | None:
        """Tokens the next call may generate under the token budget (None: no budget)."""
        return max(self.tokens - rollout.generated, 0) if self.tokens else None


class ProxyService:
    """Serves calls for the rollouts in ``registry``."""

    def __init__(self, template: ChatTemplate, parser: ToolParser, engine: Engine, registry: Registry,
                 max_inflight: int = 0, force_tool_calls: int = 0, max_tokens: int = 0,
                 max_context_tokens: int = 0, budget: Budget | None = None) -> None:
        self.template, self.parser, self.engine, self.registry = template, parser, engine, registry
        self._kept = kept_markers(template, parser)  # the parser's markers, where they are special tokens
        self.force_tool_calls = force_tool_calls
        self.max_tokens = max_tokens
        self.budget = budget or Budget()
        self.max_context_tokens = max_context_tokens
        self._engine_context: int | None = None  # asked from the engine until it answers
        self._slots = asyncio.Semaphore(max_inflight) if max_inflight > 0 else None
        self._cpu = ThreadPoolExecutor(max_workers=PLAN_WORKERS, thread_name_prefix="forge-plan")
        self.open_calls = 0  # calls past planning: a lone one commits its record on the loop (``_commit``)

    def _capped(self, sampling: Sampling, left: int | None = None) -> Sampling:
        """The harness's sampling with the proxy's response cap: the default when it sets none, the ceiling
        when it asks for more (harnesses such as Codex set none, and a rambling policy fills the context);
        and never more than ``left``, what the rollout's token budget still allows."""
        caps = ([self.max_tokens] if self.max_tokens else []) + ([max(left, 1)] if left is not None else [])
        if not caps or (sampling.max_tokens is not None and sampling.max_tokens <= min(caps)):
            return sampling
        return dataclasses.replace(sampling, max_tokens=min(caps))

    async def context_limit(self) -> int:
        """Tokens a prompt must stay under: the smaller of ``max_context_tokens`` and the engine's context
        (vLLM: ``max_model_len``); 0 when neither is known (then only the engine checks)."""
        if self._engine_context is None:
            self._engine_context = await self.engine.context_tokens()
        return min([n for n in (self.max_context_tokens, self._engine_context) if n], default=0)

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run CPU-heavy ``fn`` in a planning worker thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn, *args)

    async def count_tokens(self, request: ChatRequest, rollout: Rollout) -> int:
        """The prompt's tokens, as a call would have them without prefix reuse; past the context, the
        same ``ContextTooLong`` a call gets (counting stops there)."""
        limit = await self.context_limit()
        return len((await self.offload(self._draft, rollout, request, [], limit)).prompt_ids)

    def forced_ids(self, request: ChatRequest, call_index: int = 0) -> list[int]:
        if request.tools and request.tool_choice == "auto" and call_index < self.force_tool_calls:
            request.tool_choice = "required"  # the proxy's policy setting, not the harness's request
        if not request.tools or request.tool_choice in ("auto", "none"):
            return []
        name = None if request.tool_choice == "required" else request.tool_choice
        return self.template.encode(self.parser.forced_prefix(name))

    async def _plan(self, rollout: Rollout, request: ChatRequest) -> tuple[Plan, list[int]]:
        """Draft the prompt in a worker thread, then claim the head it extends (see ``lineage``)."""
        limit = await self.context_limit()
        async with rollout.planning:
            heads = rollout.lineage.snapshot()
            chars, last = message_chars(request.messages), rollout.last_draft
            if last is not None and last[0] < INLINE_DRAFT_S and abs(chars - last[1]) <= INLINE_NEW_CHARS:
                plan, cost = self._timed_draft(rollout, request, heads, limit)
            else:
                plan, cost = await self.offload(self._timed_draft, rollout, request, heads, limit)
            rollout.last_draft = (cost, chars)
            forced = self.forced_ids(request, rollout.next_call)  # the index begin_call gives it next
            check_fits(len(plan.prompt_ids) + len(forced), limit)
            return rollout.lineage.reserve(plan), forced

    @classmethod
    def _timed_draft(cls, rollout: Rollout, request: ChatRequest, heads: list[Head],
                     limit: int) -> tuple[Plan, float]:
        """``_draft`` and the CPU seconds it took (this thread's: not the wait for a worker or the GIL)."""
        started = time.thread_time()
        plan = cls._draft(rollout, request, heads, limit)
        return plan, time.thread_time() - started

    @staticmethod
    def _draft(rollout: Rollout, request: ChatRequest, heads: list[Head], limit: int) -> Plan:
        """``Lineage.draft`` (in a worker thread); a conversation the template cannot render is a 400."""
        try:
            return rollout.lineage.draft(request.messages, request.tools, heads, rollout.trajectory, limit)
        except BadRequest:
            raise
        except Exception as exc:  # noqa: BLE001  (the template rejects this input: the caller's 400)
            raise BadRequest(f"the chat template cannot render this conversation: {one_line(exc)}") from exc

    async def turn(self, rollout: Rollout, request: ChatRequest, dialect: str,
                   received: float) -> AsyncGenerator[list[Event], None]:
        """The events of one call, in batches: one per engine chunk that made any (the answer goes out a write
        per batch), the last ending with ``Finish``. The call is recorded before that last batch is yielded;
        the events of the engine's last chunk wait for it, to go out with ``Finish`` in one write (the answer
        ends when it would have: after its record is durable). A rollout whose budget is spent is answered at
        once with a length stop and no text (no engine call, nothing recorded but the mark)."""
        spent = self.budget.spent(rollout)
        if spent is not None:
            await self.truncate(rollout, spent)
            request.call = rollout.next_call
            yield [Finish("length", 0, 0)]
            return
        plan, forced = await self._plan(rollout, request)
        try:
            index = rollout.begin_call()
        except BaseException:  # the start could not be written (disk full): nothing began
            rollout.lineage.release(plan)
            raise
        request.prompt_tokens, request.call = len(plan.prompt_ids), index
        state = CallState(rollout, plan, index, dialect, received, forced=forced, request=request)
        state.marks["prepared"] = time.perf_counter()
        handed_over = False  # to commit, which ends the call (in flight, head) whatever happens here
        self.open_calls += 1
        try:
            last: list[Event] = []
            batches = self._generate(state, request, last)
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    yield batch
            finish = self._finish_reason(state, request)
            handed_over = True
            record = state.record("ok")
            await self.commit(rollout, record, plan)
            spent = self.budget.spent(rollout) if finish == "length" else None
            if spent is not None:  # the budget, not the harness's own cap, ended this answer
                await self.truncate(rollout, spent)
            last.append(Finish(finish, len(plan.prompt_ids), len(state.forced) + len(state.response)))
            yield last
            # The consumer asks for more once the answer's end is on its way out (both the stream and the JSON
            # body go out in this task step): the head's reply is worked out after that, not before it.
            asyncio.get_running_loop().call_soon(rollout.lineage.warm, record.segment)
        except ProviderError as exc:
            handed_over = True
            await self.commit(rollout, state.record("engine_error", str(exc)), plan)
            raise
        except BadRequest as exc:  # the engine refused the call: no use keeping a prompt it would not take
            handed_over = True
            await self.commit(rollout, state.record("engine_error", str(exc), keep_prompt=False), plan)
            raise
        finally:
            self.open_calls -= 1
            if not handed_over:  # cancelled or closed: the harness went away mid-call
                self._commit_now(rollout, state.record("client_disconnected", "the client disconnected"))
                rollout.lineage.release(plan)

    @staticmethod
    def _finish_reason(state: CallState, request: ChatRequest) -> Literal["stop", "length", "tool_calls"]:
        if state.n_calls and state.finish != "length":
            return "tool_calls"
        return "length" if state.finish == "length" else "stop"

    async def _generate(self, state: CallState, request: ChatRequest,
                        last: list[Event]) -> AsyncGenerator[list[Event], None]:
        """The call's events a batch per engine chunk; those of the engine's last chunk (and whatever the decoder
        and the tool-call parser still held) are put in ``last`` instead, for ``turn`` to send with ``Finish``."""
        decoder = IncrementalDecoder(self.template, self._kept)
        parser = self.parser.stream(request.tools) if request.tool_choice != "none" else None

        def parse(text: str, final: bool = False) -> list[Event]:
            events: list[Event] = parser.feed(text) if parser else ([TextDelta(text)] if text else [])
            if final and parser:
                events += parser.finish()
            for event in events:
                if isinstance(event, ToolCallDone):
                    state.n_calls += 1
                    state.calls.append(event.call)
                elif isinstance(event, TextDelta):
                    state.text.append(event.text)
            return events

        batch = parse(decoder.push(state.forced))
        if batch:
            yield batch
        async with self._slot():
            state.marks["engine_start"] = time.perf_counter()
            sampling = self._capped(request.sampling, self.budget.left(state.rollout))
            chunks = self.engine.stream(state.plan.prompt_ids + state.forced, sampling)
            # runs once the request is out and the stream waits for the engine's first piece
            asyncio.get_running_loop().call_soon(state.describe_request)
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    state.marks.setdefault("first", time.perf_counter())
                    state.response += chunk.token_ids
                    state.logprobs += chunk.logprobs
                    state.finish = chunk.finish_reason or state.finish
                    batch = parse(decoder.push(chunk.token_ids))
                    if chunk.finish_reason is not None:
                        last += batch
                    elif batch:
                        yield batch
            state.marks["engine_end"] = time.perf_counter()
        last += parse(decoder.flush(), final=True)

    @contextlib.asynccontextmanager
    async def _slot(self):
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield

    async def truncate(self, rollout: Rollout, why: str) -> None:
        """Mark ``rollout`` truncated (once; durable before the answer that says so)."""
        if rollout.trajectory.truncated is not None:
            return
        async with rollout.lock:
            if rollout.trajectory.truncated is None:
                await self.write(rollout, {"t": "truncated", "why": why})
                rollout.trajectory.truncated = why

    async def write(self, rollout: Rollout, event: dict, alone: bool = False) -> None:
        """Append ``event`` to the rollout's log, durable on return (the store's group-commit journal:
        the events written meanwhile share one fdatasync), off the event loop; ``alone`` (a call's record
        when no other call is under way: nothing else waits on the loop) on it, saving two thread hand-offs."""
        if rollout.log and self.registry.store is not None:
            await self.registry.store.journal.append(rollout.log, event, inline=alone)

    async def create_rollout(self, metadata: dict, rollout_id: str | None) -> tuple[Rollout, str]:
        rollout_id = self.registry.new_id(rollout_id)
        # The file is made off the loop; of two creates of one id that race there, the second finds it: refused.
        log = await self.offload(self.registry.create_log, rollout_id)
        try:
            rollout, token, event = self.registry.create(metadata, rollout_id, log)
        except BaseException:
            if log is not None:
                log.remove_if_empty()
            raise
        try:
            await self.write(rollout, event)
        except Exception:  # a rollout whose open event is not on disk does not exist
            self.registry.discard(rollout)
            raise
        return rollout, token

    async def finish_rollout(self, rollout: Rollout, reward: float | None, status: str, metadata: dict) -> None:
        """Finish ``rollout`` once the event is durable; when it cannot be written, the rollout stays open
        (the finish can be sent again)."""
        async with rollout.lock:
            event = self.registry.finish_event(rollout, reward, status, metadata)
            await self.write(rollout, event)
            self.registry.finish(rollout, event)

    async def commit(self, rollout: Rollout, record: CallRecord, plan: Plan | None = None) -> None:
        """Make ``record`` durable, then apply it and release ``plan``'s head. It runs to the end even
        when the caller is cancelled meanwhile: a record written but never applied would leave the
        head free for a call that then extends a stale prefix."""
        task = asyncio.ensure_future(self._commit(rollout, record, plan))
        task.add_done_callback(retrieved)
        await asyncio.shield(task)

    async def _commit(self, rollout: Rollout, record: CallRecord, plan: Plan | None) -> None:
        """One at a time per rollout, in log order."""
        try:
            async with rollout.lock:
                self._place(rollout, record)
                try:
                    await self.write(rollout, {"t": "call", **record.to_wire()}, alone=self.open_calls <= 1)
                except StorageError as exc:
                    rollout.apply(unrecorded(record, exc))
                    raise
                rollout.apply(record, plan)
        finally:
            rollout.in_flight.discard(record.index)
            if plan is not None:
                rollout.lineage.release(plan)

    def _commit_now(self, rollout: Rollout, record: CallRecord) -> None:
        """The same, synchronously (from a cancelled task, which cannot await) and without fdatasync:
        no answer depends on this record, and the event loop must not wait for the disk."""
        self._place(rollout, record)
        try:
            if rollout.log:
                rollout.log.append({"t": "call", **record.to_wire()}, sync=False)
        except StorageError as exc:
            log.warning("the disconnected call %s of %s is not recorded: %s", record.index, rollout.id, exc)
            record = unrecorded(record, exc)
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
        if self.registry.store is not None:
            await asyncio.to_thread(self.registry.store.close)
        self._cpu.shutdown(wait=False, cancel_futures=True)


def unrecorded(record: CallRecord, exc: StorageError) -> CallRecord:
    """What memory keeps of a call its log could not take: ``interrupted``, as recovery will read it
    (its ``start`` is in the log, its record is not)."""
    return CallRecord(index=record.index, status="interrupted", dialect=record.dialect,
                      telemetry=record.telemetry, error=f"not recorded: {exc.what}")
