"""Rollouts the proxy serves: who may call (a secret token each), and what each has recorded.

Key invariant: a token maps to exactly one rollout, and a call can only ever be recorded into
the rollout its token names; finished rollouts no longer accept calls. Only the token's sha256
is kept (in memory and on disk), so a log on disk cannot be used to impersonate a harness.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from openforgerl.errors import ProxyError
from openforgerl.log import get_logger
from openforgerl.rollout.proxy.conversation import BadRequest, shown
from openforgerl.rollout.proxy.lineage import Lineage, Plan
from openforgerl.rollout.proxy.store import RolloutLog, Store, finished_summary, parse_events
from openforgerl.rollout.proxy.template import ChatTemplate
from openforgerl.rollout.proxy.tool_parser import ToolParser
from openforgerl.rollout.trajectory import CallRecord, Trajectory

log = get_logger(__name__)

ROLLOUT_ID_PREFIX = "r-"
"""Rollout ids the proxy makes start with it; reply ids carry the rest."""
ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a chosen rollout id may be: it names the rollout's log file, so no path separators, no dot first."""


TOKEN_PREFIX = "fr-"
SHARD_TOKEN = re.compile(r"fr-s(\d{1,4})-")


def shard_prefix(shard: int, shards: int) -> str:
    """How the tokens of ``shard`` (of ``shards``) begin: the shard is readable from a token, its secret is not."""
    return TOKEN_PREFIX if shards <= 1 else f"{TOKEN_PREFIX}s{shard}-"


def token_shard(token: str | None) -> int | None:
    """The shard a token was minted by (None: an unsharded proxy's token, or not ours)."""
    match = SHARD_TOKEN.match(token or "")
    return int(match.group(1)) if match else None


def check_rollout_id(value: object) -> str:
    """``value`` as a rollout id; a ``BadRequest`` when it is not one."""
    if not isinstance(value, str) or not ROLLOUT_ID.fullmatch(value):
        raise BadRequest(f"id must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit; "
                         f"got {shown(value)}")
    return value


def token_sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Rollout:
    id: str
    token_sha: str
    trajectory: Trajectory
    lineage: Lineage
    log: RolloutLog | None
    created: float = field(default_factory=time.time)
    next_call: int = 0
    generated: int = 0
    """Tokens the policy generated over the rollout's recorded calls (its token budget's measure)."""
    in_flight: set[int] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # log writes + applying them, in order
    planning: asyncio.Lock = field(default_factory=asyncio.Lock)  # one call drafted at a time, in order
    last_draft: tuple[float, int] | None = None
    """Seconds the last call's draft took and the characters of its messages: whether the next may be
    drafted on the event loop (see ``ProxyService._plan``)."""

    @property
    def open(self) -> bool:
        return self.trajectory.status == "running"

    def begin_call(self) -> int:
        """The next call's index, marked in flight once its ``start`` is in the log (when that write
        fails, a ``StorageError`` and nothing begun)."""
        index = self.next_call
        if self.log:
            self.log.append({"t": "start", "i": index, "at": time.time()}, sync=False)
        self.next_call = index + 1
        self.in_flight.add(index)
        return index

    def apply(self, record: CallRecord, plan: Plan | None = None) -> None:
        """Add a record that is already durable to the in-memory trajectory and lineage (``plan``: the call's,
        when this proxy made it)."""
        self.in_flight.discard(record.index)
        self.generated += len(record.response) if record.status == "ok" else 0
        self.trajectory.add(record)
        self.lineage.record(record, self.trajectory, plan)
        record.drop_ids()  # the segment and the head hold them now


class Registry:
    """All rollouts, by id and by token hash; recovers them from the store on start.

    Finished rollouts beyond the ``keep_finished`` most recent leave memory (their log holds
    everything) and are read back from disk when asked for, so memory stays bounded however
    long the proxy runs.
    """

    def __init__(self, template: ChatTemplate, parser: ToolParser, store: Store | None,
                 keep_finished: int = 64, token_prefix: str = TOKEN_PREFIX) -> None:
        self.template, self.parser, self.store = template, parser, store
        self.token_prefix = token_prefix
        self.by_id: dict[str, Rollout] = {}
        self.by_token: dict[str, Rollout] = {}
        self.retired: dict[str, dict[str, Any]] = {}  # id -> status/reward/calls, trajectory on disk
        self.keep_finished = keep_finished
        self._finished: list[str] = []

    def _new(self, rollout_id: str, sha: str, metadata: dict[str, Any], register: bool = True,
             new: bool = False, log: RolloutLog | None = None) -> Rollout:
        if log is None and self.store and register:
            log = self.store.open_log(rollout_id, new)
        rollout = Rollout(id=rollout_id, token_sha=sha,
                          trajectory=Trajectory(rollout_id, metadata=dict(metadata)),
                          lineage=Lineage(self.template, self.parser), log=log)
        if register:
            self.by_id[rollout_id] = rollout
            self.by_token[sha] = rollout
        return rollout

    def get(self, rollout_id: str) -> Rollout | None:
        """A rollout by id, read back from its log if it has left memory."""
        rollout = self.by_id.get(rollout_id)
        if rollout is None and rollout_id in self.retired and self.store is not None:
            events = self.store.read(rollout_id)
            rollout = self._build(rollout_id, events, read_only=True, register=False) if events else None
        return rollout

    def summaries(self) -> list[dict[str, Any]]:
        live = [{"id": r.id, "status": r.trajectory.status, "calls": len(r.trajectory.calls)}
                for r in self.by_id.values()]
        return live + [{"id": i, "status": s["status"], "calls": s["calls"]} for i, s in self.retired.items()]

    def _retire_old(self, rollout: Rollout) -> None:
        self._finished.append(rollout.id)
        while len(self._finished) > self.keep_finished and self.store is not None:
            old = self.by_id.pop(self._finished.pop(0), None)
            if old is not None and not old.in_flight:
                self.by_token.pop(old.token_sha, None)
                self.retired[old.id] = {"status": old.trajectory.status, "reward": old.trajectory.reward,
                                        "calls": len(old.trajectory.calls)}
            elif old is not None:  # still answering a late call: keep it a while longer
                self.by_id[old.id] = old
                self._finished.append(old.id)
                break

    def new_id(self, rollout_id: str | None = None) -> str:
        """The id a new rollout gets (``rollout_id``, checked, or a fresh one); ``ProxyError`` when it is taken."""
        rollout_id = ROLLOUT_ID_PREFIX + secrets.token_hex(8) if rollout_id is None else check_rollout_id(rollout_id)
        if rollout_id in self.by_id or rollout_id in self.retired:
            raise ProxyError(f"rollout {rollout_id!r} exists already")
        return rollout_id

    def create_log(self, rollout_id: str) -> RolloutLog | None:
        """A new rollout's log file, created (refusing one that exists); a file system call: the proxy makes it
        in a worker thread (creating a file costs ~0.4 ms on ext4 here, the event loop's time)."""
        return self.store.open_log(rollout_id, new=True) if self.store is not None else None

    def create(self, metadata: dict[str, Any] | None = None, rollout_id: str | None = None,
               log: RolloutLog | None = None) -> tuple[Rollout, str, dict[str, Any]]:
        """A new rollout, its token, and the ``open`` event the caller must make durable (or ``discard``).
        ``log``: its ``create_log``, made already (``rollout_id`` is then the id it was made for)."""
        rollout_id = self.new_id(rollout_id)
        token = self.token_prefix + secrets.token_urlsafe(32)
        rollout = self._new(rollout_id, token_sha(token), metadata or {}, new=True, log=log)
        return rollout, token, {"t": "open", "id": rollout_id, "token_sha": rollout.token_sha,
                                "created": rollout.created, "metadata": rollout.trajectory.metadata}

    def discard(self, rollout: Rollout) -> None:
        """Forget a rollout just created whose ``open`` event could not be written (its log is empty)."""
        self.by_id.pop(rollout.id, None)
        self.by_token.pop(rollout.token_sha, None)
        if rollout.log:
            rollout.log.remove_if_empty()

    def by_api_key(self, key: str | None) -> Rollout | None:
        rollout = self.by_token.get(token_sha(key)) if key else None
        return rollout if rollout is not None and rollout.open else None

    def finish_event(self, rollout: Rollout, reward: float | None, status: str,
                     metadata: dict[str, Any]) -> dict[str, Any]:
        if not rollout.open:
            raise ProxyError(f"rollout {rollout.id} is finished already ({rollout.trajectory.status})")
        return {"t": "finish", "reward": reward, "status": status, "metadata": metadata}

    def finish(self, rollout: Rollout, event: dict[str, Any]) -> None:
        """Apply a durable ``finish`` event."""
        self._apply_finish(rollout, event["reward"], event["status"], event["metadata"])
        self._retire_old(rollout)

    @staticmethod
    def _apply_finish(rollout: Rollout, reward, status, metadata) -> None:
        rollout.trajectory.reward, rollout.trajectory.status = reward, status
        rollout.trajectory.metadata.update(metadata or {})
        if rollout.log:
            rollout.log.close()

    def recover(self, *, read_only: bool = False) -> int:
        """Rebuild every rollout on disk; calls that were in flight are recorded as interrupted
        (``read_only``: in memory only, for reading the logs of a proxy that may still run).
        Finished rollouts are only indexed; their calls are decoded when asked for."""
        if self.store is None:
            return 0
        for rollout_id, data in self.store.scan():
            summary = finished_summary(data)
            if summary is not None and not read_only:
                self.retired[rollout_id] = summary
                continue
            events = parse_events(data, rollout_id)
            if events:
                self._build(rollout_id, events, read_only)
        return len(self.by_id) + len(self.retired)

    def _build(self, rollout_id: str, events: list[dict[str, Any]], read_only: bool = False,
               register: bool = True) -> Rollout:
        opened = events[0]
        rollout = self._new(rollout_id, opened["token_sha"], opened.get("metadata") or {}, register)
        rollout.created = opened.get("created", rollout.created)
        started: set[int] = set()
        for event in events[1:]:
            kind = event.get("t")
            if kind == "start":
                started.add(event["i"])
            elif kind in ("call", "interrupted"):
                record = (CallRecord.from_wire(event) if kind == "call"
                          else CallRecord(index=event["i"], status="interrupted"))
                started.discard(record.index)
                rollout.apply(record)
            elif kind == "truncated":
                rollout.trajectory.truncated = event.get("why") or "its budget was spent"
            elif kind == "finish":
                self._apply_finish(rollout, event.get("reward"), event.get("status", "completed"),
                                   event.get("metadata") or {})
        rollout.next_call = max([c.index + 1 for c in rollout.trajectory.calls] + [max(started, default=-1) + 1])
        for index in sorted(started):
            if read_only or not register:
                rollout.trajectory.add(CallRecord(index=index, status="interrupted", error="in flight"))
            else:
                self._interrupt(rollout, index)
        if (read_only or not register) and rollout.log:
            rollout.log.close()
        log.info("recovered rollout %s: %d calls, %s", rollout_id, len(rollout.trajectory.calls),
                 rollout.trajectory.status)
        return rollout

    def _interrupt(self, rollout: Rollout, index: int) -> None:
        record = CallRecord(index=index, status="interrupted", error="the proxy stopped during this call")
        # Only recover() gets here (registering, so with the store): _new opened an open rollout's log.
        assert self.store is not None
        log_ = rollout.log if rollout.open else self.store.open_log(rollout.id)
        assert log_ is not None
        log_.append({"t": "interrupted", "i": index})
        if not rollout.open:
            log_.close()
        rollout.trajectory.add(record)

    def close(self) -> None:
        for rollout in self.by_id.values():
            if rollout.log:
                rollout.log.close()
