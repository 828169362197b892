"""Detached background services forge starts and finds again: dockerd, the image registry, the vLLM server.

Invariant: forge only ever signals a process it started. Starting the service NAME writes its record
``state_dir()/NAME.json`` (pid, argv, log, and whatever the service adds) and ``NAME.pid`` (the bare
pid, so ``kill $(cat NAME.pid)`` works as an undo). A record is trusted only while
``/proc/PID/cmdline`` still shows that argv, so a recycled pid or a stale file never leads to
signalling an unrelated process; a trusted one is stopped as a whole process group (TERM, a grace
period, then KILL for what is left).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import httpx

from openforgerl.errors import ForgeError, ResourceError, map_os_errors
from openforgerl.paths import state_dir
from openforgerl.processes import is_alive

CMDLINE_WAIT_S = 5.0  # how long a just-started process may take to show its argv


@dataclass(frozen=True, kw_only=True)
class ServiceRecord:
    """What forge remembers about a service it started; a service adds its own fields by subclassing."""

    pid: int
    command: list[str]
    log: str
    log_offset: int = 0  # where this run's output starts in the (appended-to) log
    started_at: float = 0.0


RecordT = TypeVar("RecordT", bound=ServiceRecord)


class Service(Generic[RecordT]):
    """The background service forge runs as ``name``, its record stored as ``record_type``."""

    def __init__(self, name: str, record_type: type[RecordT]) -> None:
        self.name = name
        self.record_type = record_type

    @property
    def record_file(self) -> Path:
        return state_dir() / f"{self.name}.json"

    @property
    def pid_file(self) -> Path:
        return state_dir() / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return state_dir() / f"{self.name}.log"

    @property
    def _legacy_cmd_file(self) -> Path:
        # Before records, forge kept a stack service's argv here; such services are still found.
        return state_dir() / f"{self.name}.cmd"

    def start(self, command: Sequence[str], env: Mapping[str, str] | None = None, **fields: Any) -> RecordT:
        """Start ``command`` in its own session (it outlives forge), output appended to ``log_file``.

        ``env`` is added to this process's environment; ``fields`` are the record's own fields."""
        command = list(command)
        with map_os_errors(f"starting {command[0]} with its log at {self.log_file}"):
            state_dir().mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "ab") as log:
                offset = log.tell()
                log.write(f"\n--- forge started {' '.join(command)} at {time.strftime('%F %T')}\n".encode())
                log.flush()
                process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True, env={**os.environ, **(env or {})})
            record = self.record_type(pid=process.pid, command=command, log=str(self.log_file),
                                      log_offset=offset, started_at=time.time(), **fields)
            self._save(record)
        _wait_for_cmdline(process.pid)
        return record

    def running(self) -> RecordT | None:
        """The record of the service forge started, while that very process still runs; else None."""
        record = self._load()
        return record if record is not None and _is_running(record) else None

    def stop(self, grace_s: float = 30.0) -> RecordT | None:
        """Stop the service's process group (TERM, KILL after ``grace_s``) and forget it; None if none ran."""
        record = self.running()
        if record is not None:
            # Identity was checked by running(); from here wait on the pid itself, since an exiting
            # process shows an empty cmdline before it is gone.
            _signal_group(record.pid, signal.SIGTERM)
            _wait_gone(record.pid, grace_s)
            _signal_group(record.pid, signal.SIGKILL)  # children that ignored TERM, or a wedged leader
            _wait_gone(record.pid, 5.0)
        self._forget()
        return record

    def wait_ready(self, record: ServiceRecord, ready: Callable[[], bool], timeout_s: float,
                   poll_s: float = 0.5) -> Literal["ready", "exited", "timed out"]:
        """Poll ``ready`` until it holds, the process exits, or ``timeout_s`` passes; say which."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return "ready"
            if not _is_running(record):
                return "exited"
            time.sleep(poll_s)
        return "timed out"

    def await_ready(self, record: ServiceRecord, ready: Callable[[], bool], timeout_s: float, error: type[ForgeError],
                    *, what: str, exited_fix: str | None = None, timeout_fix: str | None = None,
                    poll_s: float = 0.5, tail_lines: int = 8) -> None:
        """``wait_ready``, raising ``error`` with the latest log lines when the service exits or times out.

        ``what`` names the service in the message ("dockerd", "the smollm2 server at URL")."""
        outcome = self.wait_ready(record, ready, timeout_s, poll_s)
        if outcome == "ready":
            return
        block = tail_lines > 8  # long tails read better one line each
        tail = self.log_tail(tail_lines, block=block)
        tail = f"; its log ends with:\n{tail}\n" if block else f": {tail}"
        if outcome == "exited":
            raise error(f"{what} exited while starting{tail}", fix=exited_fix or f"read {record.log}")
        raise error(f"{what} (pid {record.pid}) was not ready within {timeout_s:.0f} s{tail}",
                    fix=timeout_fix or f"read {record.log}; stop it with kill {record.pid}")

    def log_tail(self, lines: int = 8, *, block: bool = False) -> str:
        """The last non-empty lines the latest run wrote, for error messages: ``a | b | c`` on one line,
        or with ``block`` one indented line each."""
        record = self._load()
        try:
            with open(self.log_file, "rb") as log:
                log.seek(record.log_offset if record else 0)
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return "    (no log)" if block else "(no log)"
        kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
        if block:
            return "\n".join("    " + line for line in kept)
        return " | ".join(line.strip() for line in kept)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold this service's lock, so two forge commands never start or stop it at once."""
        return exclusive(self.name)

    def _save(self, record: RecordT) -> None:
        staging = self.record_file.with_suffix(".tmp")
        staging.write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
        os.replace(staging, self.record_file)
        self.pid_file.write_text(f"{record.pid}\n", encoding="utf-8")

    def _load(self) -> RecordT | None:
        """The stored record, alive or not."""
        try:
            return self.record_type(**json.loads(self.record_file.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            pass
        try:
            pid = int(self.pid_file.read_text(encoding="utf-8").strip())
            command = json.loads(self._legacy_cmd_file.read_text(encoding="utf-8"))
            return self.record_type(pid=pid, command=command, log=str(self.log_file))
        except (OSError, ValueError, TypeError):
            return None

    def _forget(self) -> None:
        for path in (self.record_file, self.pid_file, self._legacy_cmd_file):
            path.unlink(missing_ok=True)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _wait_for_cmdline(pid: int) -> None:
    """Popen returns while exec() is still setting up the new program, when /proc shows no argv yet;
    wait for it, so a record is recognised (and can be stopped) the moment ``start`` returns."""
    deadline = time.monotonic() + CMDLINE_WAIT_S
    while not _cmdline(pid) and is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.001)


def _is_running(record: ServiceRecord) -> bool:
    return is_alive(record.pid) and _same_command(_cmdline(record.pid), record.command)


def _same_command(running: list[str], started: list[str]) -> bool:
    """Does a process's cmdline show the argv we started? A script started by name shows up as
    ``interpreter /path/script args``, so compare the arguments and the program's base name."""
    if not running or not started:
        return False
    args = started[1:]
    if args and running[-len(args):] != args:
        return False
    program = Path(started[0]).name
    return any(Path(part).name == program for part in running[: len(running) - len(args)])


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is already gone
        os.killpg(pid, sig)


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold ``state_dir()/NAME.lock`` so two forge commands never start or build the same thing at once."""
    path = state_dir() / f"{name}.lock"
    with map_os_errors(f"locking {path}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "a")
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if we crash
        yield


def port_in_use(host: str, port: int) -> bool:
    """Whether something already holds ``host:port`` (we try to bind it, then let go at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT does not count
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise ResourceError(f"cannot bind {host}:{port}: {exc.strerror}",
                                fix="use a local address such as 127.0.0.1 with --host") from exc
    return False


def healthy(health_url: str) -> bool:
    """Whether ``health_url`` answers 200 right now."""
    try:
        return httpx.get(health_url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
