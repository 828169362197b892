"""Background services forge starts itself (dockerd, the registry, vLLM), tracked by pid files.

Invariant: forge only ever signals a process it started. ``start_detached`` writes
``state_dir()/NAME.pid`` (the bare pid, so ``kill $(cat NAME.pid)`` works as an undo) and
``NAME.cmd`` (the argv); ``read_pid`` trusts the pid only while ``/proc/PID/cmdline`` still shows
that argv, so a recycled pid or a stale file never leads to killing an unrelated process.

Also here: ``apt_install``, the one way the local stack installs Debian packages (root only).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from openforgerl.errors import StackError
from openforgerl.paths import state_dir


def pid_file(name: str) -> Path:
    return state_dir() / f"{name}.pid"


def log_file(name: str) -> Path:
    return state_dir() / f"{name}.log"


def _cmd_file(name: str) -> Path:
    return state_dir() / f"{name}.cmd"


def start_detached(cmd: Sequence[str], name: str, env: Mapping[str, str] | None = None) -> int:
    """Start ``cmd`` in its own session (it outlives forge), logging to ``log_file(name)``."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(log_file(name), "ab") as log:
        log.write(f"\n--- forge started {' '.join(cmd)} at {time.strftime('%F %T')}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env={**os.environ, **(env or {})},
        )
    _cmd_file(name).write_text(json.dumps(list(cmd)), encoding="utf-8")
    pid_file(name).write_text(f"{proc.pid}\n", encoding="utf-8")
    return proc.pid


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as dead (and is reaped if it is our child)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    # The state letter follows the ")" closing the command name, which may itself contain spaces.
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def read_pid(name: str) -> int | None:
    """The pid of the running service forge started as ``name``, or None."""
    try:
        pid = int(pid_file(name).read_text(encoding="utf-8").strip())
        started = json.loads(_cmd_file(name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not is_alive(pid) or not _same_command(_cmdline(pid), started):
        return None
    return pid


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


def _forget(name: str) -> None:
    for path in (pid_file(name), _cmd_file(name)):
        path.unlink(missing_ok=True)


def stop(name: str, timeout: float = 30.0) -> int | None:
    """Stop the service started as ``name`` (TERM, then KILL); return its pid, or None if none ran."""
    pid = read_pid(name)
    if pid is None:
        _forget(name)
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_alive(pid):
        os.kill(pid, signal.SIGKILL)
    _forget(name)
    return pid


def log_tail(name: str, lines: int = 8) -> str:
    """The last lines of a service's log, for error messages."""
    try:
        text = log_file(name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold ``state_dir()/NAME.lock`` so two forge commands never start or build the same thing at once."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if we crash
        yield


def is_root() -> bool:
    return os.geteuid() == 0


_apt_updated = False


def apt_install(packages: Sequence[str]) -> None:
    """``apt-get install`` Debian packages (root only); failures become a StackError with the output."""
    global _apt_updated
    if not is_root():
        raise StackError(f"{', '.join(packages)} not installed and forge is not root",
                         fix=f"run: sudo apt-get install -y {' '.join(packages)}  (or rerun as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [] if _apt_updated else [["apt-get", "update"]]
    steps.append(["apt-get", "install", "-y", "--no-install-recommends", *packages])
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-4:])
            raise StackError(f"{' '.join(step)} failed (exit {out.returncode}): {tail}",
                             fix="check the apt sources and network, then rerun forge stack up")
    _apt_updated = True
