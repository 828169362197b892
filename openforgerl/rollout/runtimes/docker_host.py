"""A container seen from the host: its processes and its writable layer, read without entering it.

Everything an agent can touch inside a container (``ps``, ``find``, the shell, ``/proc`` as mounted
there) can lie to a command run inside it. These functions read the host's own ``/proc`` and the
overlay2 upper directory instead, so what they report is what is there.
Invariant: nothing here executes anything in the container; each function works only when forge may
read those host paths (root, overlay2) and says so (``None``) otherwise, so callers can fall back.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

Signature = tuple[int, int, int, int]
"""What changes when anything about a file changes: inode, mode, size, ctime."""


@dataclass(frozen=True)
class HostView:
    init_pid: int
    """The container's init as the host numbers it."""
    upper: Path | None
    """The writable layer's directory, when forge can read it (overlay2, root)."""


def view(api: Any, container_id: str) -> HostView:
    attrs = api.inspect_container(container_id)
    data = (attrs.get("GraphDriver") or {}).get("Data") or {}
    upper = Path(data["UpperDir"]) if data.get("UpperDir") else None
    readable = upper is not None and os.access(upper, os.R_OK | os.X_OK)
    return HostView(int(attrs["State"]["Pid"]), upper if readable else None)


# ---- the writable layer -----------------------------------------------------------------------

def snapshot(upper: Path, roots: list[str]) -> dict[str, Signature]:
    """Every entry of the writable layer below ``roots`` (container paths), with its signature.

    Overlay records a deletion as a character device and a replaced directory as a new inode, so a
    delete or a rename shows up here like any other change."""
    entries: dict[str, Signature] = {}
    for root in roots:
        _walk(upper, upper / root.lstrip("/"), entries)
    return entries


def _walk(upper: Path, top: Path, entries: dict[str, Signature]) -> None:
    pending = [top]
    while pending:  # iterative: a hostile tree may be deeper than Python's recursion limit
        path = pending.pop()
        try:
            info = path.lstat()
        except OSError:
            continue
        entries["/" + str(path.relative_to(upper))] = (info.st_ino, info.st_mode, info.st_size, info.st_ctime_ns)
        if stat.S_ISDIR(info.st_mode):
            try:
                pending += [Path(child.path) for child in os.scandir(path)]
            except OSError:
                continue


def changed_since(before: dict[str, Signature], after: dict[str, Signature]) -> list[str]:
    return sorted(path for path, signature in after.items() if before.get(path) != signature)


def without_ancestors(paths: list[str]) -> list[str]:
    """Drop the directories that appear only because something below them changed: overlay (and
    ``docker diff``) list every parent of a changed file; the file itself is the change."""
    listed = set(paths)
    implied = {str(parent) for path in paths for parent in PurePosixPath(path).parents}
    return sorted(path for path in listed if path not in implied)


def layer_bytes(upper: Path) -> int:
    """Disk used by the writable layer (allocated blocks, so a sparse file counts what it holds)."""
    total = 0
    for directory, _, files in os.walk(upper):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return total


# ---- processes --------------------------------------------------------------------------------

def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _uids(pid: int) -> list[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return [int(value) for value in line.split()[1:]]
    except OSError:
        pass
    return []


def unprivileged_processes(init_pid: int) -> list[int] | None:
    """Host pids of the container's processes that do not run as root (an unprivileged agent and
    everything it started); None when forge cannot see the container's namespace."""
    namespace = _pid_namespace(init_pid)
    if namespace is None:
        return None
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _pid_namespace(int(entry.name)) == namespace:
            uids = _uids(int(entry.name))
            if uids and any(uid != 0 for uid in uids):
                found.append(int(entry.name))
    return found


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): field 3 (state) is index 0."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def exec_sessions(exec_pid: int) -> set[int]:
    """The sessions an exec's processes run in (host numbering of their leaders): the exec's own, and
    the one ``setsid`` opens for its command (Docker already makes the exec a session leader, so
    ``setsid`` forks the child that leads the command's session)."""
    sessions = set()
    for pid in [exec_pid, *_children(exec_pid)]:
        fields = _stat_fields(pid)
        if len(fields) > 3:
            sessions.add(int(fields[3]))
    return sessions


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def runs_command(init_pid: int, command: list[str]) -> bool | None:
    """Whether a process under the container's init (Docker's ``--init``) runs exactly ``command``: the image's
    entrypoint has exec'd or started it (or the image has none). None when the host's /proc cannot tell (init
    gone, or not this host's)."""
    if not Path(f"/proc/{init_pid}").exists():
        return None
    want = b"\0".join(part.encode() for part in command) + b"\0"
    seen, todo = 0, _children(init_pid)
    while todo and seen < 10_000:
        pid = todo.pop()
        seen += 1
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == want:
                return True
        except OSError:
            continue
        todo += _children(pid)
    return False


def session_members(init_pid: int, session: int) -> list[int]:
    """Host pids of the container's processes in ``session`` (host numbering of its leader)."""
    namespace = _pid_namespace(init_pid)
    if namespace is None:
        return []
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or _pid_namespace(int(entry.name)) != namespace:
            continue
        fields = _stat_fields(int(entry.name))
        if len(fields) > 3 and int(fields[3]) == session:  # field 6 of stat: the session id
            members.append(int(entry.name))
    return members


def memory_cgroup(init_pid: int) -> tuple[Path, int] | None:
    """The container's memory cgroup directory on the host and its cgroup version (2 or 1); None if unreadable."""
    try:
        lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: one hierarchy
            return Path("/sys/fs/cgroup") / path.lstrip("/"), 2
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), 1
    return None


def _entries(path: Path) -> dict[str, int]:
    entries = {}
    for entry in path.read_text().splitlines():
        key, _, value = entry.partition(" ")
        entries[key] = int(value)
    return entries


def oom_kills(init_pid: int) -> int | None:
    """Processes the kernel OOM-killed in the container's memory cgroup (v2 or v1); None if unreadable."""
    found = memory_cgroup(init_pid)
    if found is None:
        return None
    folder, version = found
    try:
        return _entries(folder / ("memory.events" if version == 2 else "memory.oom_control")).get("oom_kill")
    except (OSError, ValueError):
        return None


def anon_memory(folder: Path, version: int) -> int | None:
    """Bytes of anonymous memory (what reclaim cannot drop without swap: heaps, stacks) the processes of a
    memory cgroup (``memory_cgroup``) hold now; None if unreadable (the container gone)."""
    try:
        stat = _entries(folder / "memory.stat")
    except (OSError, ValueError):
        return None
    return stat.get("anon") if version == 2 else stat.get("total_rss")


def drop_default_route(init_pid: int) -> bool:
    """Remove the container's default route (its network namespace, entered from the host), so an
    isolated sandbox has no route out at all, on any Docker version. False when it could not."""
    nsenter, ip = shutil.which("nsenter"), shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    if nsenter is None or ip is None:
        return False
    out = subprocess.run([nsenter, "-t", str(init_pid), "-n", ip, "route", "del", "default"], capture_output=True,
                         text=True, timeout=10)
    return out.returncode == 0 or "No such process" in out.stderr  # none to remove is just as good


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
