"""A detached local server process that outlives the command that started it, found again by its record.

Invariant: a server is identified by its record file (JSON: pid, url, what it serves, log path) in
``state_dir()``; a record whose process is gone or is not ours (pid reused) counts as no server and
is removed, and ``stop`` only ever signals the process group the record names after checking that
its command line is the one we started.
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from openforgerl.errors import ProviderError, ResourceError, map_os_errors


@dataclass(frozen=True)
class ServerRecord:
    """What ``forge serve`` remembers about the server it started."""

    pid: int
    model: str
    host: str
    port: int
    url: str
    log: str
    command: list[str] = field(default_factory=list)
    started_at: float = 0.0
    log_offset: int = 0  # where this run's output starts in the (appended-to) log

    def save(self, path: Path) -> None:
        with map_os_errors(f"writing {path}"):
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = path.with_suffix(".tmp")
            staging.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
            os.replace(staging, path)

    @classmethod
    def load(cls, path: Path) -> ServerRecord | None:
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None


def process_alive(pid: int, command_marker: str) -> bool:
    """True when ``pid`` runs, is not a zombie, and its command line contains ``command_marker``."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if we are its parent, so a finished child is not "alive"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and command_marker in cmdline


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise ResourceError(f"cannot bind {host}:{port}: {exc.strerror}",
                                fix="use a local address such as 127.0.0.1 with --host") from exc
    return False


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Serialise start/stop between concurrent ``forge serve`` invocations."""
    with map_os_errors(f"locking {lock_path}"):
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a")
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def start_detached(command: list[str], env: dict[str, str], log_path: Path) -> tuple[int, int]:
    """Start ``command`` in its own session (so it survives us), output appended to ``log_path``.

    Returns the pid and the log offset where this run's output starts."""
    with map_os_errors(f"starting {command[0]} with its log at {log_path}"):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            offset = log.tell()
            log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
            log.flush()
            process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    return process.pid, offset


def log_tail(path: Path, offset: int = 0, lines: int = 15) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return "    (no log)"
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept)


def healthy(health_url: str) -> bool:
    try:
        return httpx.get(health_url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(record: ServerRecord, health_url: str, command_marker: str, timeout_s: float) -> None:
    """Poll ``health_url`` until it answers 200; ProviderError with the log tail if the server dies or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if healthy(health_url):
            return
        if not process_alive(record.pid, command_marker):
            raise ProviderError(f"the {record.model} server exited during startup; its log ends with:\n"
                                f"{log_tail(Path(record.log), record.log_offset)}\n",
                                fix=f"read the full log {record.log}, correct the cause, then rerun")
        time.sleep(1.0)
    raise ProviderError(f"the {record.model} server did not become healthy at {health_url} within "
                        f"{timeout_s:.0f} s; its log ends with:\n{log_tail(Path(record.log), record.log_offset)}\n",
                        fix=f"read {record.log}; on a busy machine raise the startup timeout (--timeout)")


def stop_process_group(pid: int, command_marker: str, grace_s: float = 30.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL after ``grace_s``; only if it is still ours."""
    if not process_alive(pid, command_marker):
        return
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not process_alive(pid, command_marker):
            _signal_group(pid, signal.SIGKILL)  # engine children that ignored SIGTERM
            return
        time.sleep(0.5)
    _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
