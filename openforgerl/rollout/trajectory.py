"""Trajectories: the calls of one rollout merged into token-exact training segments.

Key invariant: a segment's ``prompt_ids + response_ids`` is exactly the token sequence the engine
saw and produced — model tokens (mask 1, with their sampled logprobs) were never re-tokenised,
and the tokens in between (tool results, user turns, template glue: mask 0, logprob 0) are the
ones the engine was actually given. A call that does not extend a segment starts a new one.
"""

from __future__ import annotations

import base64
import struct
from array import array
from dataclasses import dataclass, field
from typing import Any, Literal

CallKind = Literal["clean", "realigned", "fork"]
CallStatus = Literal["ok", "engine_error", "client_disconnected", "interrupted"]
KINDS: tuple[CallKind, ...] = ("clean", "realigned", "fork")


def pack_ids(ids: list[int]) -> str:
    """Native int32s, base64 (the bytes ``array("i", ids)`` has; ``struct`` packs a list ~2x faster)."""
    return base64.b64encode(struct.pack(f"{len(ids)}i", *ids)).decode()


def unpack_ids(text: str) -> list[int]:
    return array("i", base64.b64decode(text)).tolist()


def pack_floats(values: list[float]) -> str:
    return base64.b64encode(array("f", values).tobytes()).decode()


def unpack_floats(text: str) -> list[float]:
    return array("f", base64.b64decode(text)).tolist()


EMPTY_IDS: list[int] = []
EMPTY_FLOATS: list[float] = []
"""What an applied record holds instead of its ids (shared: never appended to)."""


@dataclass
class CallRecord:
    """One model call as recorded: only the ids the segment did not already hold."""

    index: int
    status: CallStatus
    kind: CallKind = "fork"
    segment: int = -1
    """Segment this call belongs to; -1 when it produced no usable turn (error, disconnect)."""
    base: tuple[int, int] | None = None
    """(segment, n): the prompt starts with the first n ids of that segment, copied exactly."""
    prompt_suffix: list[int] = field(default_factory=list)
    forced: list[int] = field(default_factory=list)
    """Tokens the proxy wrote into the answer itself (e.g. to force a tool call): mask 0."""
    response: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""
    dialect: str = ""
    telemetry: dict[str, float] = field(default_factory=dict)
    head: dict[str, Any] | None = None
    """What the proxy needs to recognise the next call of this lineage (see lineage.py)."""
    error: str = ""
    digest: dict[str, Any] | None = None
    """What the call meant (tools offered, results sent back, calls and text answered; see proxy/digest.py)."""

    def __post_init__(self) -> None:
        # logprobs are stored as float32 (what engines compute in); keep memory equal to disk
        self.logprobs = array("f", self.logprobs).tolist()

    def drop_ids(self) -> None:
        """Let go of the call's ids and log-probs once its segment and lineage hold them (a live rollout
        keeps each id once); ``to_wire`` is for before that."""
        self.prompt_suffix = self.forced = self.response = EMPTY_IDS
        self.logprobs = EMPTY_FLOATS

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"i": self.index, "st": self.status, "k": self.kind, "seg": self.segment,
                                "p": pack_ids(self.prompt_suffix), "r": pack_ids(self.response),
                                "lp": pack_floats(self.logprobs), "fin": self.finish, "d": self.dialect,
                                "tel": self.telemetry}
        for key, value in (("b", self.base), ("f", self.forced and pack_ids(self.forced)),
                           ("h", self.head), ("err", self.error), ("g", self.digest)):
            if value:
                wire[key] = value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> CallRecord:
        return cls(index=wire["i"], status=wire["st"], kind=wire["k"], segment=wire["seg"],
                   base=tuple(wire["b"]) if wire.get("b") else None,
                   prompt_suffix=unpack_ids(wire["p"]), forced=unpack_ids(wire.get("f", "")),
                   response=unpack_ids(wire["r"]), logprobs=unpack_floats(wire["lp"]),
                   finish=wire["fin"], dialect=wire["d"], telemetry=wire["tel"],
                   head=wire.get("h"), error=wire.get("err", ""), digest=wire.get("g"))


def packed(ids: list[int]) -> bytes:
    """``ids`` as machine int64s: compared with memcmp, not object by object. ``struct`` packs a list about
    twice as fast as ``array``'s constructor (~0.1 ms less for a 6k-token prompt, once per forking call)."""
    return struct.pack(f"{len(ids)}q", *ids)


def common_prefix(a: list[int] | bytes, b: list[int] | bytes) -> int:
    """Length of the longest common prefix of two id lists (or their ``packed`` forms), by bisection
    over comparisons of packed slices (each a memcmp)."""
    x = a if isinstance(a, bytes) else packed(a)
    y = b if isinstance(b, bytes) else packed(b)
    low, high = 0, min(len(x), len(y)) // 8
    if x[:high * 8] == y[:high * 8]:
        return high
    while low < high:
        middle = (low + high + 1) // 2
        if x[:middle * 8] == y[:middle * 8]:
            low = middle
        else:
            high = middle - 1
    return low


MAX_SHARE_DEPTH = 16
"""How many references a segment's prompt may go through to reach the ids it shares: a longer chain
(a rollout forking again and again off its newest fork) stores that fork's prompt whole, so reading a
prompt stays a bounded walk and memory stays ~1/16 of full copies."""


class Segment:
    """One training sample.

    A fork's prompt may start with the first ``n`` ids of an earlier segment (``base``): it then holds a
    reference to that segment and only its own ids after them, in memory as in the log, so a rollout that
    forks on every call (the same long history sent again) keeps each prompt once. ``prompt_ids`` expands it.
    """

    def __init__(self, prompt_ids: list[int] | None = None, response_ids: list[int] | None = None,
                 response_mask: list[int] | None = None, logprobs: list[float] | None = None,
                 calls: list[int] | None = None, *, base: tuple[Segment, int] | None = None) -> None:
        own = list(prompt_ids or [])
        if base is not None:
            segment, n = base
            while segment._base is not None and n <= segment._base[1]:  # those ids are the base's base's
                segment = segment._base[0]
            base = (segment, n)
            if segment._depth >= MAX_SHARE_DEPTH:
                own, base = segment.ids(n) + own, None
        self._base: tuple[Segment, int] | None = base
        self._own = own
        self._depth: int = base[0]._depth + 1 if base else 0
        self._packed: bytes | None = None
        self.response_ids: list[int] = response_ids if response_ids is not None else []
        # the mask and the log-probs are read only when the segment is exported: packed (1 and 4 bytes a token,
        # not a pointer and a float object), they leave the ids as most of what a live rollout holds
        self._mask = array("b", response_mask or [])
        self._logprobs = array("f", logprobs or [])
        self.calls: list[int] = calls if calls is not None else []

    @property
    def response_mask(self) -> list[int]:
        return self._mask.tolist()

    @property
    def logprobs(self) -> list[float]:
        """float32 values, as engines compute them and the log stores them."""
        return self._logprobs.tolist()

    @property
    def prompt_ids(self) -> list[int]:
        """The whole prompt (a new list when it is shared with an earlier segment)."""
        if self._base is None:
            return self._own
        segment, n = self._base
        return segment.ids(n) + self._own

    @property
    def prompt_len(self) -> int:
        return (self._base[1] if self._base else 0) + len(self._own)

    def __len__(self) -> int:
        return self.prompt_len + len(self.response_ids)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Segment) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Segment(prompt={self.prompt_len} ids, response={len(self.response_ids)} ids, calls={self.calls})"

    def ids(self, n: int | None = None) -> list[int]:
        """The first ``n`` ids of prompt + response (all when None)."""
        prompt_len = self.prompt_len
        n = len(self) if n is None else min(n, len(self))
        if n > prompt_len:
            return self.prompt_ids + self.response_ids[:n - prompt_len]
        if self._base is None:
            return self._own[:n]
        segment, shared = self._base
        return segment.ids(n) if n <= shared else segment.ids(shared) + self._own[:n - shared]

    def common_prefix(self, mine: bytes, n: int) -> int:
        """How many of this segment's first ``n`` ids the packed ids ``mine`` (``lineage.packed``) start with;
        the prompt's own ids are packed once (they never change), the shared part is asked of its segment."""
        done = 0
        if self._base is not None:
            segment, shared = self._base
            done = segment.common_prefix(mine, min(n, shared))
            if done < min(n, shared) or n <= shared:
                return done
        if self._packed is None:  # racing draft threads compute the same bytes
            self._packed = packed(self._own)
        own = min(n - done, len(self._own))
        matched = common_prefix(mine[done * 8:], self._packed[:own * 8])
        done += matched
        if matched < own or n <= self.prompt_len:
            return done
        return done + common_prefix(mine[done * 8:], packed(self.response_ids[:n - done]))

    def append(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.response_ids += ids
        self._mask.frombytes(bytes([mask]) * len(ids))
        if logprobs is not None:
            self._logprobs.extend(logprobs)
        else:
            self._logprobs.frombytes(bytes(self._logprobs.itemsize * len(ids)))  # 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_ids": self.prompt_ids, "response_ids": self.response_ids,
                "response_mask": self.response_mask, "logprobs": self.logprobs, "calls": self.calls}


@dataclass
class Trajectory:
    """All calls of one rollout, their segments, and the rollout's outcome."""

    rollout_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    reward: float | None = None
    segments: list[Segment] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    truncated: str | None = None
    """Why the proxy cut the rollout short (its token or call budget was spent), else None: its last
    answers were length stops the policy did not choose, which a trainer masks or penalises."""

    def add(self, record: CallRecord) -> None:
        """Apply one recorded call (in recording order)."""
        self.calls.append(record)
        if record.status != "ok" or record.segment < 0:
            return
        if record.segment == len(self.segments):
            self.segments.append(self._new_segment(record))
        else:
            segment = self.segments[record.segment]
            segment.append(record.prompt_suffix, 0)
            segment.calls.append(record.index)
        segment = self.segments[record.segment]
        segment.append(record.forced, 0)
        segment.append(record.response, 1, record.logprobs)

    def _new_segment(self, record: CallRecord) -> Segment:
        base = (self.segments[record.base[0]], record.base[1]) if record.base else None
        return Segment(prompt_ids=record.prompt_suffix, calls=[record.index], base=base)

    def counts(self) -> dict[str, int]:
        ok = [c for c in self.calls if c.status == "ok"]
        counts: dict[str, int] = {kind: sum(c.kind == kind for c in ok) for kind in KINDS}
        for status in ("engine_error", "client_disconnected", "interrupted"):
            counts[status] = sum(c.status == status for c in self.calls)
        return counts

    def timings(self) -> dict[str, float]:
        """The rollout's model-call cost: calls, tokens and milliseconds summed over its calls."""
        keys = ("prep_ms", "queue_ms", "engine_ms", "overhead_ms", "tokens_in", "tokens_out", "tokens_reused")
        totals = {key: round(sum(c.telemetry.get(key, 0) for c in self.calls), 3) for key in keys}
        return {"calls": len(self.calls), **totals}

    def rows(self) -> list[dict[str, Any]]:
        """One training row per segment; reward, status, metadata and timings on every row."""
        timings = self.timings()
        return [{"rollout_id": self.rollout_id, "segment": i, **seg.to_dict(), "reward": self.reward,
                 "status": self.status, "truncated": self.truncated, "metadata": self.metadata, "timings": timings}
                for i, seg in enumerate(self.segments)]

    def summary(self) -> dict[str, Any]:
        return {"id": self.rollout_id, "status": self.status, "reward": self.reward, "truncated": self.truncated,
                "metadata": self.metadata, "counts": self.counts(), "timings": self.timings(),
                "segments": len(self.segments),
                "calls": [{"index": c.index, "status": c.status, "kind": c.kind, "segment": c.segment,
                           "finish": c.finish, "dialect": c.dialect, "error": c.error, **c.telemetry,
                           **({"digest": c.digest} if c.digest else {})}
                          for c in self.calls]}

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "segments": [s.to_dict() for s in self.segments]}
