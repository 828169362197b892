"""Write-ahead logs: one append-only file per rollout under ``<data_dir>/rollouts/``.

Key invariant: a call's record is on disk (written and fdatasync'd) before its response is sent,
so a proxy killed at any moment loses nothing it answered. Lines are JSON; token ids and logprobs
are packed (base64 int32/float32) and each call stores only the ids its segment did not hold.

Events: ``open`` (rollout created; the token's sha256, never the token), ``start`` (a call began;
not synced — it only tells recovery which calls were in flight), ``call`` (a finished call),
``finish`` (reward/status), ``interrupted`` (written by recovery for calls that never finished).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from openforgerl.errors import ProxyError, map_os_errors
from openforgerl.log import get_logger

log = get_logger(__name__)


class RolloutLog:
    """The append-only log of one rollout; its file stays open only while recently used."""

    def __init__(self, path: Path, store: Store | None = None) -> None:
        self.path = path
        self._store = store
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()
        self.bytes_written = path.stat().st_size
        if self.bytes_written and not path.read_bytes().endswith(b"\n"):
            os.write(self._fd, b"\n")  # end a torn line so the next event starts clean
        if store is not None:
            store.opened(self)

    def append(self, event: dict[str, Any], sync: bool = True) -> None:
        line = orjson.dumps(event) + b"\n"
        try:
            with self._lock, map_os_errors(f"writing {self.path}"):
                reopened = self._fd < 0  # closed when idle or finished; reopen to append
                if reopened:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                os.write(self._fd, line)
                if sync:
                    os.fdatasync(self._fd)
        except OSError as exc:
            raise ProxyError(f"cannot record to {self.path}: {exc}") from exc
        self.bytes_written += len(line)
        if self._store is not None and reopened:
            self._store.opened(self)
        elif self._store is not None:
            self._store.used(self)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class Store:
    """The directory of rollout logs."""

    def __init__(self, data_dir: str | Path, max_open: int = 256) -> None:
        self.root = Path(data_dir) / "rollouts"
        with map_os_errors(f"creating {self.root}"):
            self.root.mkdir(parents=True, exist_ok=True)
        self.max_open = max_open
        self._open: OrderedDict[int, RolloutLog] = OrderedDict()  # most recently used last
        self._lock = threading.Lock()

    def open_log(self, rollout_id: str) -> RolloutLog:
        return RolloutLog(self.root / f"{rollout_id}.log", self)

    def opened(self, log: RolloutLog) -> None:
        """Track an open file; close the least recently used ones beyond ``max_open``."""
        with self._lock:
            self._open[id(log)] = log
            idle = [self._open.popitem(last=False)[1] for _ in range(len(self._open) - self.max_open)]
        for old in idle:
            old.close()

    def used(self, log: RolloutLog) -> None:
        with self._lock:
            if id(log) in self._open:
                self._open.move_to_end(id(log))

    def scan(self) -> Iterator[tuple[str, bytes]]:
        """Every rollout log on disk (id, raw bytes), oldest first."""
        for path in sorted(self.root.glob("*.log"), key=lambda p: p.stat().st_mtime):
            yield path.stem, path.read_bytes()

    def read(self, rollout_id: str) -> list[dict[str, Any]]:
        path = self.root / f"{rollout_id}.log"
        return parse_events(path.read_bytes(), str(path)) if path.exists() else []


def parse_events(data: bytes, where: str) -> list[dict[str, Any]]:
    """The events of one log; a torn line (a write cut short by a crash) is skipped."""
    events = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            events.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            log.warning("%s:%d: unreadable line skipped (torn write?)", where, number)
    return events if events and events[0].get("t") == "open" else []


def finished_summary(data: bytes) -> dict[str, Any] | None:
    """Status, reward and call count of a finished log, read without decoding its calls."""
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        event = orjson.loads(last)
    except orjson.JSONDecodeError:
        return None
    if event.get("t") != "finish":
        return None
    return {"status": event.get("status", "completed"), "reward": event.get("reward"),
            "calls": data.count(b'{"t":"call"') + data.count(b'{"t":"interrupted"')}
