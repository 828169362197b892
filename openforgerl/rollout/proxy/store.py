"""Write-ahead logs: one append-only file per rollout under ``<data_dir>/rollouts/``.

Key invariant: a call's record is on disk (durable) before its response is sent, so a proxy killed
at any moment, or a machine that loses power, loses nothing it answered. Lines are JSON; token ids
and logprobs are packed (base64 int32/float32) and each call stores only the ids its segment did
not hold.

Group commit: the proxy's writes go through one ``Journal`` per store (``rollouts/journal.wal``).
Its writer thread takes every event queued meanwhile, appends each to its rollout's log without a
sync, then writes the batch to the journal with one ``fdatasync``: the calls finishing together
share one sync instead of one per rollout log. The journal is cut at checkpoints, after every log
it covers is synced; on start, ``replay_journal`` restores to each log what the journal holds and
the log lost (a machine crash before the checkpoint), so the logs alone stay the record.

Events: ``open`` (rollout created; the token's sha256, never the token), ``start`` (a call began;
not synced — it only tells recovery which calls were in flight), ``call`` (a finished call),
``finish`` (reward/status), ``interrupted`` (written by recovery for calls that never finished).

A write that fails (disk full, read-only, I/O error) is cut back off the file, so the log stays a
clean sequence of lines and the same event can be written again once the disk has room.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from openforgerl.errors import ProxyError, ResourceError
from openforgerl.log import get_logger
from openforgerl.processes import open_files_limit

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
    if code in (errno.EMFILE, errno.ENFILE):
        return ("too many open files" if code == errno.EMFILE else "too many open files on this machine",
                f"raise the limit of open files the proxy starts with (ulimit -n: {open_files_limit()} now; "
                "LimitNOFILE= for a service), or spread the rollouts over more proxy workers", 503)
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied", "make it writable by this user, or give the proxy another data dir", 503
    if code in (errno.ENOENT, errno.ENOTDIR, errno.EEXIST):
        return ("a part of the path is missing or not a directory",
                "create the directory (or fix the path), or give the proxy another data dir", 503)
    return os.strerror(code) if code else str(exc), "check the disk (dmesg) or give the proxy another data dir", 503


def open_shedding(path: Path, flags: int, store: Store | None, keep: RolloutLog | None) -> int:
    """``os.open``; when the process is out of descriptors, ``store`` closes the logs nobody is writing and it is
    tried once more (a proxy whose harnesses' connections took the descriptors still records their calls)."""
    try:
        return os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE) or store is None or not store.shed(keep):
            raise
    return os.open(path, flags, 0o600)


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
            self._fd = open_shedding(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_EXCL if new else 0),
                                     store, self)
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

    def append(self, event: dict[str, Any], sync: bool = True) -> tuple[int, bytes]:
        """Write one event (and fdatasync it); a ``StorageError`` leaves the file as it was. Returns
        where it was written and its bytes."""
        line = (b"\n" if self._torn else b"") + orjson.dumps(event) + b"\n"
        with self._lock:
            reopened = self._fd < 0  # closed when idle or finished; reopen to append
            try:
                if reopened:
                    self._fd = open_shedding(self.path, os.O_WRONLY | os.O_APPEND, self._store, self)
                self._write(line, sync)
            except OSError as exc:
                self._cut()
                raise storage_error(exc, f"record to {self.path}") from exc
            offset = self.bytes_written
            self.bytes_written += len(line)
            self._torn = False
        if self._store is not None and reopened:
            self._store.opened(self)
        elif self._store is not None:
            self._store.used(self)
        return offset, line

    def write(self, event: dict[str, Any]) -> tuple[int, bytes]:
        """Append one event without a sync (the journal makes it durable): its offset and bytes."""
        return self.append(event, sync=False)

    def sync(self) -> None:
        """fdatasync what was written (reopening a log closed meanwhile), without holding up its writers."""
        with self._lock:
            fd = os.dup(self._fd) if self._fd >= 0 else os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            self._sync(fd)
        finally:
            os.close(fd)

    def cut_back(self, offset: int) -> None:
        """Take back what was written from ``offset`` on (its journal batch could not be made durable)."""
        with self._lock:
            try:
                fd = self._fd if self._fd >= 0 else os.open(self.path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.ftruncate(fd, offset)
                finally:
                    if fd != self._fd:
                        os.close(fd)
                self.bytes_written = offset
                if offset:  # what it was cut back to may end torn (a batch that began one)
                    with open(self.path, "rb") as log_file:
                        log_file.seek(offset - 1)
                        self._torn = log_file.read(1) != b"\n"
            except OSError:
                self._torn = True

    @staticmethod
    def _sync(fd: int) -> None:
        os.fdatasync(fd)

    def _write(self, line: bytes, sync: bool) -> None:
        view = memoryview(line)
        while view:  # a short write (the disk filling up) is continued; the next one raises ENOSPC
            view = view[os.write(self._fd, view):]
        if sync:
            self._sync(self._fd)

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

    def close_if_idle(self) -> bool:
        """Close the file unless another thread is writing to it now; whether it closed one."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._fd < 0:
                return False
            os.close(self._fd)
            self._fd = -1
            return True
        finally:
            self._lock.release()


class Store:
    """The directory of rollout logs."""

    def __init__(self, data_dir: str | Path, max_open: int = 256) -> None:
        self.root = Path(data_dir) / "rollouts"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise unusable(self.root, exc) from exc
        # logs kept open take at most an eighth of the process's descriptors: the rest are for connections
        self.max_open = min(max_open, max(4, open_files_limit() // 8))
        self._open: OrderedDict[int, RolloutLog] = OrderedDict()  # most recently used last
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._repairs: dict[str, tuple[int, bytes, int]] | None = None
        self._shed_warned = -math.inf

    @property
    def journal(self) -> Journal:
        """The group-commit journal the proxy's writes go through (started at first use; a store only
        read, as next to a running proxy, never starts one)."""
        with self._lock:
            if self._journal is None:
                self._journal = Journal(self)
            return self._journal

    def replay_journal(self) -> int:
        """Before recovery: restore what a machine crash took from the logs (see ``replay_journal``)."""
        restored = replay_journal(self.root)
        with self._lock:
            self._repairs = {}  # the logs hold it all now
        return restored

    def close(self) -> None:
        """Stop the journal's writer after a checkpoint (what it holds is then in the synced logs)."""
        with self._lock:
            journal, self._journal = self._journal, None
        if journal is not None:
            journal.close()

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

    def shed(self, keep: RolloutLog | None) -> int:
        """Close every open log but ``keep`` that no thread is writing to (the process ran out of descriptors:
        its connections took them); how many. They reopen when next written."""
        with self._lock:
            logs = [other for other in self._open.values() if other is not keep]
        closed = [other for other in logs if other.close_if_idle()]
        with self._lock:
            for other in closed:
                self._open.pop(id(other), None)
        if closed and time.monotonic() > self._shed_warned + 60:  # once a minute while it lasts
            self._shed_warned = time.monotonic()
            log.warning("out of file descriptors (ulimit -n %d: raise it): closed %d idle rollout logs to go on "
                        "recording; harnesses beyond the limit cannot connect", open_files_limit(), len(closed))
        return len(closed)

    def used(self, log: RolloutLog) -> None:
        with self._lock:
            if id(log) in self._open:
                self._open.move_to_end(id(log))

    def scan(self) -> Iterator[tuple[str, bytes]]:
        """Every rollout log on disk (id, raw bytes), oldest first, as the journal would leave it: a
        store only read (an export after a machine crash, before the proxy restarts) sees what the
        journal holds and the logs lost, without writing."""
        repairs = self._journal_repairs()
        for path in sorted(self.root.glob("*.log"), key=lambda p: p.stat().st_mtime):
            try:
                data = path.read_bytes()
            except OSError as exc:  # a log that cannot be read is a rollout that cannot be recovered
                raise storage_error(exc, f"read {path}") from exc
            yield path.stem, repaired(data, repairs.get(path.stem))
        for rollout_id, repair in repairs.items():
            if not (self.root / f"{rollout_id}.log").exists():
                yield rollout_id, repaired(b"", repair)

    def read(self, rollout_id: str) -> list[dict[str, Any]]:
        path = self.root / f"{rollout_id}.log"
        repair = self._journal_repairs().get(rollout_id)
        try:
            data = path.read_bytes() if path.exists() else b""
        except OSError as exc:
            raise storage_error(exc, f"read {path}") from exc
        data = repaired(data, repair)
        return parse_events(data, str(path)) if data else []

    def _journal_repairs(self) -> dict[str, tuple[int, bytes, int]]:
        """Read once: a proxy replays its journal before it first scans, so it finds nothing here."""
        with self._lock:
            if self._repairs is None:
                self._repairs = journal_repairs(self.root)[1]
            return self._repairs


def repaired(data: bytes, repair: tuple[int, bytes, int] | None) -> bytes:
    return data if repair is None else data[:repair[0]] + repair[1]


JOURNALS = ("journal-0.wal", "journal-1.wal")
_HEADER = struct.Struct("<4sQ")  # magic, generation (which of the two files is newer)
_MAGIC = b"FJ01"
_ENTRY = struct.Struct("<IIQI")  # id length, line length, offset in the log, crc32 of id + line


class Journal:
    """Group commit for one store's logs: one writer thread, one ``fdatasync`` per batch.

    ``append`` queues an event and waits until it is durable. The writer takes everything queued,
    appends each event to its log (no sync), then writes one journal entry per event (rollout id, the
    event's offset in its log, its bytes, a crc32) and syncs the journal once. An event whose log
    write fails gets that ``StorageError`` alone; when the journal write or sync fails, the batch's
    events are cut back off their logs and all get it.

    Two journal files take turns: past ``checkpoint_bytes`` the writer goes on in the other one (a new
    generation) while a checkpoint thread syncs every log the full one covers, then empties it; so
    the syncs of a checkpoint never hold up a call. Opening a journal first replays what is there.

    ``append(..., inline=True)`` (a caller that knows nothing else waits on its event loop) commits on
    the calling thread when the writer is idle and nothing is queued: the same write and sync, without
    the two thread hand-offs (to the writer and back to the loop), which at one stream are most of the
    commit's time beyond the sync itself.
    """

    def __init__(self, store: Store, checkpoint_bytes: int = 32 << 20) -> None:
        self.store, self.checkpoint_bytes = store, checkpoint_bytes
        self.paths = [store.root / name for name in JOURNALS]
        replay_journal(store.root)  # both files empty from here on
        try:
            self._fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for path in self.paths]
        except OSError as exc:
            raise storage_error(exc, f"open {self.paths[0]}") from exc
        self.batches = self.events = self.checkpoints = self.inline = 0  # counters, for benchmarks and tests
        self._busy = False  # a batch is being committed (by the writer, or inline by a caller)
        self._active, self.generation, self.size = 0, 1, 0
        self._header_due = True  # a file's header goes out with its first batch
        self._dirty: dict[Path, RolloutLog] = {}  # logs the active file covers
        self._queue: list[tuple[RolloutLog, dict[str, Any], asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._wake = threading.Condition()
        self._closing = False
        self._checkpoint: threading.Thread | None = None
        self._thread = threading.Thread(target=self._run, name="forge-journal", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path:
        """The file being written."""
        return self.paths[self._active]

    async def append(self, log: RolloutLog, event: dict[str, Any], inline: bool = False) -> None:
        """Append ``event`` to ``log``; returns once it is durable (``StorageError`` when it cannot be).
        ``inline``: commit it on this thread, blocking the event loop for the sync, if the writer is idle
        (else it queues as usual); for a caller that knows nothing else waits on the loop meanwhile."""
        loop = asyncio.get_running_loop()
        with self._wake:
            if self._closing:
                raise ProxyError("the proxy's journal is closed")
            inline = inline and not self._busy and not self._queue
            if inline:
                self._busy = True
            else:
                done = loop.create_future()
                self._queue.append((log, event, done, loop))
                self._wake.notify()
        if not inline:
            await done
            return
        try:
            error = self._commit_batch([(log, event, None, loop)])[0]
            self.inline += 1
        finally:
            with self._wake:
                self._busy = False
                if self._queue or self._closing:
                    self._wake.notify()
        if error is not None:
            raise error

    def close(self) -> None:
        """Write what is queued, checkpoint both files, stop."""
        with self._wake:
            if self._closing:
                return
            self._closing = True
            self._wake.notify()
        self._thread.join()
        if self._checkpoint is not None:
            self._checkpoint.join()
        try:
            checkpoint(self._dirty, self.store.root, self._fds[self._active])
        except OSError as exc:
            log.warning("the journal %s is kept (a log could not be synced: %s)", self.path, exc)
        for fd in self._fds:
            os.close(fd)

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._busy or (not self._queue and not self._closing):
                    self._wake.wait()
                batch, self._queue = self._queue, []
                self._busy = bool(batch)
            if not batch:
                return
            try:
                errors = self._commit_batch(batch)
            finally:
                with self._wake:
                    self._busy = False
            by_loop: dict[asyncio.AbstractEventLoop, list] = {}
            for (_, _, done, loop), error in zip(batch, errors, strict=True):
                by_loop.setdefault(loop, []).append((done, error))
            for loop, results in by_loop.items():
                try:
                    loop.call_soon_threadsafe(settle, results)
                except RuntimeError:  # that loop is closed: nobody waits any more
                    pass

    def _commit_batch(self, batch: list) -> list[BaseException | None]:
        try:
            return self._commit(batch)
        except Exception as exc:  # noqa: BLE001  (a bug must fail these calls, not stop the writer)
            log.exception("the proxy's journal failed on a batch")
            return [exc] * len(batch)

    def _commit(self, batch: list) -> list[BaseException | None]:
        errors: list[BaseException | None] = [None] * len(batch)
        written: list[tuple[int, RolloutLog, int]] = []
        parts = [_HEADER.pack(_MAGIC, self.generation)] if self._header_due else []
        for i, (rollout_log, event, _, _) in enumerate(batch):
            try:
                offset, line = rollout_log.write(event)
            except Exception as exc:  # noqa: BLE001  (StorageError, or an event orjson cannot encode)
                errors[i] = exc
                continue
            name = rollout_log.path.stem.encode()
            parts += [_ENTRY.pack(len(name), len(line), offset, zlib.crc32(line, zlib.crc32(name))), name, line]
            written.append((i, rollout_log, offset))
        if not written:
            return errors
        blob = b"".join(parts)
        try:
            self._write(blob)
        except OSError as exc:
            try:
                os.ftruncate(self._fds[self._active], self.size)
            except OSError:
                log.warning("could not cut a failed batch off %s (replay skips it: crc)", self.path)
            error = storage_error(exc, f"record to {self.path}")
            for i, rollout_log, offset in reversed(written):
                rollout_log.cut_back(offset)
                errors[i] = error
            return errors
        self.size += len(blob)
        self._header_due = False
        self.batches += 1
        self.events += len(written)
        for _, rollout_log, _ in written:
            self._dirty[rollout_log.path] = rollout_log
        if self.size >= self.checkpoint_bytes and (self._checkpoint is None or not self._checkpoint.is_alive()):
            self._rotate()
        return errors

    def _write(self, blob: bytes) -> None:
        fd = self._fds[self._active]
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
        os.fdatasync(fd)

    def _rotate(self) -> None:
        """Go on in the other file (emptied by the last checkpoint); checkpoint this one meanwhile."""
        full, dirty = self._fds[self._active], self._dirty
        self._active, self._dirty = 1 - self._active, {}
        self.generation += 1
        self.size, self._header_due = 0, True
        self._checkpoint = threading.Thread(target=self._checkpoint_until_done, args=(dirty, full),
                                            name="forge-checkpoint", daemon=True)
        self._checkpoint.start()

    def _checkpoint_until_done(self, dirty: dict[Path, RolloutLog], fd: int) -> None:
        while True:
            try:
                checkpoint(dirty, self.store.root, fd)
                self.checkpoints += 1
                return
            except OSError as exc:  # the file still covers them: retry (the writer keeps to the other file)
                log.warning("checkpoint of the proxy's journal postponed: %s", exc)
                if self._closing:
                    return
                time.sleep(1.0)


def checkpoint(dirty: dict[Path, RolloutLog], root: Path, fd: int) -> None:
    """Sync every log in ``dirty`` (and the directory: new logs), then empty the journal file ``fd``,
    which then covers nothing."""
    for path, rollout_log in list(dirty.items()):
        try:
            rollout_log.sync()
        except FileNotFoundError:  # removed meanwhile (an empty log of a create that failed)
            pass
        del dirty[path]
    sync_dir(root)
    os.ftruncate(fd, 0)
    os.fdatasync(fd)


def settle(results: list[tuple[asyncio.Future, BaseException | None]]) -> None:
    for done, error in results:
        if done.done():  # its waiter was cancelled
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_journal(data: bytes) -> tuple[int, list[tuple[str, int, bytes]]]:
    """A journal file's generation (0: none) and entries (rollout id, offset, line), up to the first torn
    or corrupt one."""
    if len(data) < _HEADER.size:
        return 0, []
    magic, generation = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        return 0, []
    entries, at = [], _HEADER.size
    while at + _ENTRY.size <= len(data):
        name_len, line_len, offset, crc = _ENTRY.unpack_from(data, at)
        start, end = at + _ENTRY.size, at + _ENTRY.size + name_len + line_len
        if end > len(data) or name_len > 255:
            break
        name, line = data[start:start + name_len], data[start + name_len:end]
        if zlib.crc32(line, zlib.crc32(name)) != crc:
            break
        entries.append((name.decode(), offset, line))
        at = end
    return generation, entries


def journal_repairs(root: Path) -> tuple[list[Path], dict[str, tuple[int, bytes, int]]]:
    """What the journal files in ``root`` hold that the logs lost (a machine crash between a batch and
    the checkpoint that syncs its logs), without writing anything: the journal files read, and per
    rollout id (keep, tail, events): the log should be its first ``keep`` bytes, then ``tail``.

    Per log, from its first journaled event the log does not hold at its offset, the log is cut there
    and every later journaled event rewritten in order (``start`` lines written after that point,
    never journaled, are dropped: they only mark calls in flight). A log that is gone gets back only
    what starts with its ``open`` event (a removed log is not brought back from a fragment). Next to a
    running proxy every journaled event is already in its log (written before it was journaled), so
    nothing is repaired."""
    files = []
    for path in (root / name for name in JOURNALS):
        try:
            files.append((path, *read_journal(path.read_bytes())))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise storage_error(exc, f"read {path}") from exc
    per_log: dict[str, list[tuple[int, bytes]]] = {}
    for _, _, journaled in sorted(files, key=lambda f: f[1]):  # the older generation first
        for rollout_id, offset, line in journaled:
            per_log.setdefault(rollout_id, []).append((offset, line))
    repairs = {}
    for rollout_id, entries in per_log.items():
        log_path = root / f"{rollout_id}.log"
        try:
            have = log_path.read_bytes()
        except FileNotFoundError:
            have = None
        except OSError as exc:
            raise storage_error(exc, f"read {log_path}") from exc
        first = next((i for i, (offset, line) in enumerate(entries)
                      if have is None or have[offset:offset + len(line)] != line), None)
        if first is None:
            continue
        if have is None and not entries[first][1].lstrip(b"\n").startswith(b'{"t":"open"'):
            log.warning("journal: the log of %s is gone; not restored", rollout_id)
            continue
        keep = min(entries[first][0], len(have or b""))
        head = (have or b"")[:keep]
        if head and not head.endswith(b"\n"):
            keep = head.rfind(b"\n") + 1  # a torn line at the cut
        lines = b"".join(line for _, line in entries[first:])
        tail = lines[1:] if lines.startswith(b"\n") and (not keep or head[keep - 1:keep] == b"\n") else lines
        repairs[rollout_id] = (keep, tail, len(entries) - first)
    return [path for path, _, _ in files], repairs


def replay_journal(root: Path) -> int:
    """Give each log back what the journal holds and the log lost (see ``journal_repairs``), sync them,
    empty the journal. Returns the events restored."""
    files, repairs = journal_repairs(root)
    restored = 0
    for rollout_id, (keep, tail, events) in repairs.items():
        log_path = root / f"{rollout_id}.log"
        try:  # cut, then append: a crash meanwhile leaves the head as it was and the journal whole
            fd = os.open(log_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, keep)
                view, at = memoryview(tail), keep
                while view:
                    done = os.pwrite(fd, view, at)
                    view, at = view[done:], at + done
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, f"restore {log_path} from the journal") from exc
        restored += events
        log.warning("journal: restored %d events of %s its log had lost", events, rollout_id)
    for path in files:
        try:
            sync_dir(root)
            with open(path, "r+b") as journal:
                journal.truncate(0)
                os.fdatasync(journal.fileno())
        except OSError as exc:
            raise storage_error(exc, f"empty {path} after its replay") from exc
    return restored


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
