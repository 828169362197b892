"""Write-ahead logs: one append-only file per rollout under ``<data_dir>/rollouts/``.

Key invariant: a call's record is on disk (written and fdatasync'd) before its response is sent,
so a proxy killed at any moment loses nothing it answered. Lines are JSON; token ids and logprobs
are packed (base64 int32/float32) and each call stores only the ids its segment did not hold.

Events: ``open`` (rollout created; the token's sha256, never the token), ``start`` (a call began;
not synced — it only tells recovery which calls were in flight), ``call`` (a finished call),
``finish`` (reward/status), ``interrupted`` (written by recovery for calls that never finished).

A write that fails (disk full, read-only, I/O error) is cut back off the file, so the log stays a
clean sequence of lines and the same event can be written again once the disk has room.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from openforgerl.errors import ProxyError, ResourceError
from openforgerl.log import get_logger

log = get_logger(__name__)


class StorageError(ResourceError):
    """A rollout log could not be written. ``status``: what the harness gets (507 when the disk is
    full, which its SDK retries; 503 otherwise)."""

    def __init__(self, what: str, *, fix: str, status: int, reason: str) -> None:
        self.status, self.reason = status, reason  # reason: without the path, for harnesses' eyes
        super().__init__(what, fix=fix)


def describe(exc: OSError) -> tuple[str, str, int]:
    """Why a write failed, what to do about it, and the HTTP status for the harness."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return ("no space left on device" if code == errno.ENOSPC else "disk quota exceeded",
                "free space on that filesystem (df -h); the call or finish can then be retried", 507)
    if code == errno.EROFS:
        return "the filesystem is read-only", "remount it read-write, or give the proxy another data dir", 503
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied", "make it writable by this user, or give the proxy another data dir", 503
    if code in (errno.ENOENT, errno.ENOTDIR, errno.EEXIST):
        return ("a part of the path is missing or not a directory",
                "create the directory (or fix the path), or give the proxy another data dir", 503)
    return os.strerror(code) if code else str(exc), "check the disk (dmesg) or give the proxy another data dir", 503


def storage_error(exc: OSError, doing: str) -> StorageError:
    reason, fix, status = describe(exc)
    return StorageError(f"cannot {doing}: {reason}", fix=fix, status=status, reason=reason)


class RolloutLog:
    """The append-only log of one rollout; its file stays open only while recently used."""

    def __init__(self, path: Path, store: Store | None = None, new: bool = False) -> None:
        self.path = path
        self._store = store
        self._torn = False  # a failed write could not be cut off: start the next event on a new line
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_EXCL if new else 0), 0o600)
        except FileExistsError:
            raise ProxyError(f"a log for rollout {path.stem!r} exists already in {path.parent}") from None
        except OSError as exc:
            raise storage_error(exc, f"create {path}") from exc
        self._lock = threading.Lock()
        self.bytes_written = os.fstat(self._fd).st_size
        if self.bytes_written and not path.read_bytes().endswith(b"\n"):
            self._torn = True  # end a torn line (a crash mid-write) so the next event starts clean
        if store is not None:
            store.opened(self)

    def append(self, event: dict[str, Any], sync: bool = True) -> None:
        """Write one event (and fdatasync it); a ``StorageError`` leaves the file as it was."""
        line = (b"\n" if self._torn else b"") + orjson.dumps(event) + b"\n"
        with self._lock:
            reopened = self._fd < 0  # closed when idle or finished; reopen to append
            try:
                if reopened:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                self._write(line, sync)
            except OSError as exc:
                self._cut()
                raise storage_error(exc, f"record to {self.path}") from exc
            self.bytes_written += len(line)
            self._torn = False
        if self._store is not None and reopened:
            self._store.opened(self)
        elif self._store is not None:
            self._store.used(self)

    def _write(self, line: bytes, sync: bool) -> None:
        view = memoryview(line)
        while view:  # a short write (the disk filling up) is continued; the next one raises ENOSPC
            view = view[os.write(self._fd, view):]
        if sync:
            os.fdatasync(self._fd)

    def _cut(self) -> None:
        """Drop what a failed write left (a partial line, or a line whose sync failed)."""
        try:
            if self._fd >= 0:
                os.ftruncate(self._fd, self.bytes_written)
        except OSError:
            self._torn = True

    def remove_if_empty(self) -> None:
        self.close()
        try:
            if self.path.stat().st_size == 0:
                self.path.unlink()
        except OSError:
            log.warning("could not remove the empty log %s", self.path)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class Store:
    """The directory of rollout logs."""

    def __init__(self, data_dir: str | Path, max_open: int = 256) -> None:
        self.root = Path(data_dir) / "rollouts"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unusable(self.root, exc) from exc
        self.max_open = max_open
        self._open: OrderedDict[int, RolloutLog] = OrderedDict()  # most recently used last
        self._lock = threading.Lock()

    def check_writable(self) -> None:
        """Create, write and fsync a probe file: a proxy that cannot record must not start serving."""
        probe = self.root / f".write-probe-{os.getpid()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            probe.unlink()
        except OSError as exc:
            raise unusable(self.root, exc) from exc

    def open_log(self, rollout_id: str, new: bool = False) -> RolloutLog:
        """The log of ``rollout_id``; ``new``: create it, refusing one that exists."""
        return RolloutLog(self.root / f"{rollout_id}.log", self, new)

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
            try:
                data = path.read_bytes()
            except OSError as exc:  # a log that cannot be read is a rollout that cannot be recovered
                raise storage_error(exc, f"read {path}") from exc
            yield path.stem, data

    def read(self, rollout_id: str) -> list[dict[str, Any]]:
        path = self.root / f"{rollout_id}.log"
        try:
            return parse_events(path.read_bytes(), str(path)) if path.exists() else []
        except OSError as exc:
            raise storage_error(exc, f"read {path}") from exc


def unusable(root: Path, exc: OSError) -> ResourceError:
    """The one-line start-up error for a data dir the proxy cannot write its logs to."""
    reason, fix, _ = describe(exc)
    return ResourceError(f"the proxy cannot write rollout logs in {root}: {reason}",
                         fix=fix.replace("give the proxy another data dir",
                                         "pass another --data-dir (or set OPENFORGERL_DATA)"))


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
