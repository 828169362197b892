"""Tar archives in and out of sandboxes, safely and within bounds.

What an agent leaves in a directory forge copies out (``/logs``) is hostile input: links that
point anywhere, FIFOs and devices that block or escape, gigabytes of data, a million files.
Invariant: ``extract`` writes only regular files and directories, under ``dest``, and stops at the
caps; everything it did not write is named in the report, never silently dropped, and no member
can make it raise, so a copy out of a sandbox never costs a rollout its recorded outcome.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_FILES = 10_000


@dataclass
class CopyReport:
    """What a copy out of a sandbox wrote, and what it left out."""

    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    """``path: why`` for each member not written (a link, a FIFO, a device, an unsafe name)."""
    truncated: bool = False
    """A cap was reached: later members were not copied."""

    def summary(self) -> dict[str, object]:
        return {"files": self.files, "bytes": self.bytes, "skipped": self.skipped[:50],
                "skipped_count": len(self.skipped), "truncated": self.truncated}


def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A ``tarfile`` filter for what the host puts into a sandbox: owned by root there, and writable by
    no one else, whoever runs forge. Without it a member keeps its host owner, and a researcher's
    uid 1000 is our images' agent (``AGENT_UID``): the harness's own code, the verifier's tests and
    the reference solution would be the agent's to rewrite."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode &= ~0o022
    return info


def put_archive(src: Path) -> bytes:
    """A tar of ``src`` (named by its last part) for a sandbox to unpack, every member ``owned_by_root``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(src), arcname=src.name, filter=owned_by_root)
    return buffer.getvalue()


def dirs_archive(path: str) -> bytes:
    """A tar holding only the directories of ``path`` (so ``put_archive`` has a target to unpack into).

    Unpacking it sets each of those directories to mode 0755, existing ones too: use it only where
    that is their mode (a new image layer), never on a live sandbox's /tmp."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        parts = PurePosixPath(path).parts[1:]
        for depth in range(1, len(parts) + 1):
            info = tarfile.TarInfo("/".join(parts[:depth]))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
    return buffer.getvalue()


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (a Docker archive stream), read at most once."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size], self._pending = self._pending[:size], self._pending[size:]
        return size


def _safe_name(name: str) -> str | None:
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", ".")]
    return None if not parts or ".." in parts else "/".join(parts)


def extract(chunks: Iterable[bytes], dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
            max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
    """Unpack a tar stream into ``dest``: regular files and directories only, within the caps."""
    report = CopyReport()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks)), mode="r|") as tar:
            for member in tar:
                if not _take(tar, member, dest, report, max_bytes, max_files):
                    break
    except (tarfile.TarError, OSError) as exc:  # a torn or hostile archive: keep what was written
        report.skipped.append(f"(rest of the archive): {type(exc).__name__}: {exc}")
        report.truncated = True
    return report


def _take(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, report: CopyReport, max_bytes: int,
          max_files: int) -> bool:
    """Write one member (or record why not); False once a cap is reached."""
    name = _safe_name(member.name)
    if name is None:
        report.skipped.append(f"{member.name}: unsafe name")
        return True
    if member.isdir():
        (dest / name).mkdir(parents=True, exist_ok=True)
        return True
    if not member.isreg():
        kind = "link" if member.issym() or member.islnk() else "fifo" if member.isfifo() else "special file"
        report.skipped.append(f"{name}: {kind}")
        return True
    if report.files >= max_files or report.bytes + member.size > max_bytes:
        report.skipped.append(f"{name}: over the cap ({max_files} files, {max_bytes} bytes)")
        report.truncated = True
        return False
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    if source is None:
        return True
    with open(target, "wb") as out:
        shutil.copyfileobj(source, out)
    os.chmod(target, stat.S_IMODE(member.mode) & 0o644 | 0o600)  # never executable, always ours to read
    report.files += 1
    report.bytes += member.size
    return True


def copy_tree(src: Path, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
              max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
    """The same rules for a directory on this host (the local runtime): links and special files skipped."""
    report = CopyReport()
    base = src.parent
    for directory, dirs, files in os.walk(src):
        Path(dest, os.path.relpath(directory, base)).mkdir(parents=True, exist_ok=True)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = Path(directory, name)
            relative = os.path.relpath(path, base)
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                report.skipped.append(f"{relative}: {'link' if stat.S_ISLNK(info.st_mode) else 'special file'}")
                continue
            if report.files >= max_files or report.bytes + info.st_size > max_bytes:
                report.skipped.append(f"{relative}: over the cap ({max_files} files, {max_bytes} bytes)")
                report.truncated = True
                return report
            shutil.copyfile(path, Path(dest, relative), follow_symlinks=False)
            report.files, report.bytes = report.files + 1, report.bytes + info.st_size
    return report
