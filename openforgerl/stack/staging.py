"""Building a directory beside where it belongs and renaming it into place whole.

Invariant: inside ``staged(target)`` this process is the only one building ``target`` (an fcntl lock
on ``.NAME.lock`` beside it, released by the kernel even when we are SIGKILLed); everything is built
in ``.NAME.tmp-PID``, which ``swap_in`` renames onto ``target`` in one step or which is deleted. So
a reader sees the old directory or the new one, never a half, and the leftovers of a killed build
(its temporary directories and the processes it started) are removed by the next build first.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from openforgerl.errors import StackError
from openforgerl.stack.children import kill_tagged, signals_raise


def lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.lock")


def _sibling(target: Path, kind: str) -> Path:
    return target.with_name(f".{target.name}.{kind}-{os.getpid()}")


@contextlib.contextmanager
def staged(target: Path, *, waiting: Callable[[], None] = lambda: None) -> Iterator[Path]:
    """Hold ``target``'s lock (calling ``waiting`` first when another process holds it) and yield
    the path, not yet created, to build the new ``target`` in; it is deleted unless swapped in.

    SIGTERM and SIGHUP raise inside (``signals_raise``), so the deletion runs on them too.
    """
    with signals_raise(), _locked(lock_path(target), waiting):
        remove_leftovers(target)
        staging = _sibling(target, "tmp")
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: Path, waiting: Callable[[], None]) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:  # children do not inherit it (close_fds), so none can keep the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def remove_leftovers(target: Path) -> None:
    """Delete the temporary and retired siblings of ``target`` that killed builds left, after killing
    the processes those builds started. Call it holding the lock: every builder holds it while its
    siblings exist, so any found now are abandoned, even when their pid is in use again."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(tmp|old)-\d+")
    for leftover in target.parent.glob(f".{target.name}.*-*"):
        if pattern.fullmatch(leftover.name):
            kill_tagged(str(leftover))
            shutil.rmtree(leftover, ignore_errors=True)


def discard(target: Path) -> None:
    """Delete ``target`` (renamed aside first, so it vanishes in one step even if deleting is slow)."""
    if not (target.exists() or target.is_symlink()):
        return
    retired = _sibling(target, "old")
    os.replace(target, retired)
    shutil.rmtree(retired, ignore_errors=True)


def swap_in(staging: Path, target: Path) -> None:
    """Rename the finished ``staging`` onto ``target``; an older ``target`` is renamed aside, then deleted."""
    retired = _sibling(target, "old")
    if target.exists() or target.is_symlink():
        os.replace(target, retired)
    try:
        os.replace(staging, target)
    except OSError as exc:
        # Something recreated target between the two renames (a build by a forge without this lock).
        if retired.exists() and not target.exists():
            os.replace(retired, target)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise StackError(f"{target} was recreated by another process while forge replaced it",
                             fix="stop whatever still writes there (an older forge, an orphaned npm), then rerun"
                             ) from exc
        raise
    shutil.rmtree(retired, ignore_errors=True)
