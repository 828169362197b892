"""Child processes that never outlive the forge command that started them.

Invariant: when ``run`` returns or raises (normally, on an exception, on Ctrl-C, and on SIGTERM or
SIGHUP inside ``signals_raise()``) no process of the child's process group is left. Each child gets
its own session (so a terminal's Ctrl-C reaches only forge, which then kills the whole group) and
``PR_SET_PDEATHSIG``, so the kernel kills the *direct* child when forge itself is SIGKILLed. The
child's own children are not covered by that: a process group is not signalled when its leader
dies. Every child therefore carries ``OPENFORGERL_JOB=<tag>`` in its environment (inherited by
everything it starts), and ``kill_tagged`` ends whatever a killed job left: the next run of the
same job calls it before it starts over.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from openforgerl.processes import is_alive

TAG_VARIABLE = "OPENFORGERL_JOB"
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
# Loaded before any fork: the forked child only calls into it (no imports, no allocation of note).
_LIBC = ctypes.CDLL(None, use_errno=True)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived inside ``signals_raise()``; raised so the cleanup on the way out runs.

    A BaseException like KeyboardInterrupt: ``except Exception`` handlers must not swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While inside, SIGTERM/SIGHUP raise ``Terminated`` (in the main thread); on the way out, once
    every ``finally`` inside has run, the process dies of that signal as it would have without us.

    Only signals still at their default action are taken over, so an embedding program's own handler
    wins; in other threads (where Python cannot set handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owned = [signum for signum in TERMINATING if signal.getsignal(signum) == signal.SIG_DFL]
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        # Only the first one raises: `timeout` signals us and then our process group, and the
        # second signal must not cut the cleanup of the first one short.
        if len(received) == 1:
            raise Terminated(signum)

    for signum in owned:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum in owned:
            signal.signal(signum, signal.SIG_DFL)
        if received:
            signal.raise_signal(received[0])


def run(cmd: list[str], *, tag: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to completion with its output captured; its whole process group is killed when
    this returns or raises. Raises what ``subprocess.run`` raises (FileNotFoundError, TimeoutExpired)."""
    child_env = {**(os.environ if env is None else env), TAG_VARIABLE: tag}
    proc = subprocess.Popen(cmd, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_dies_with(os.getpid()))
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        # Also after a normal exit: a grandchild left running in the group must not outlive the job.
        _kill_group(proc.pid)
        proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _dies_with(parent: int) -> Callable[[], None]:
    """The child's setup between fork and exec: the kernel sends it SIGKILL when ``parent`` dies.

    PDEATHSIG follows the forking *thread*; ``run`` waits in that thread until the child is gone.
    """

    def setup() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: nobody would kill us
            os.kill(os.getpid(), signal.SIGKILL)

    return setup


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_tagged(tag: str, *, wait: float = 5.0) -> list[int]:
    """SIGKILL every process whose environment carries ``tag`` (a killed job's survivors); wait until
    they are gone, so files they were writing can be deleted without a race. Returns their pids."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if needle in environment.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    deadline = time.monotonic() + wait
    while any(is_alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed
