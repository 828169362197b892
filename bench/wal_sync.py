"""What one shared, group-committed journal per proxy shard would save over one fdatasync'd log per rollout.

The proxy makes each call's record durable before the answer ends: today it appends the record to the
rollout's own log and fdatasyncs that file, on a pool of 8 I/O threads, so N calls finishing together cost
N syncs of N files. A journal would append the records of every call that finished meanwhile to one file
with one write and one fdatasync (group commit), keeping the per-rollout logs as unsynced copies that
recovery repairs from the journal. This bench measures the durability step alone, in one process shaped
like the proxy (an asyncio loop awaiting each append), on the same disk, same run:

- per-log: forge today (a new log every ``--records`` appends, as a rollout is; write + fdatasync each).
- per-log-nosync: the same without fdatasync (what the sync itself costs).
- per-log-batched: the same logs, one writer thread: each batch writes every record to its log, then
  fdatasyncs each log it touched (no change to what is on disk, so none to recovery).
- journal: one writer thread; each batch: one write to one file, one fdatasync.
- journal+logs: the same, plus an unsynced append of each record to its rollout's log (the whole design).

Per point: appends/s, append latency p50/p99 (submit to durable), CPU ms per append (the process: loop,
threads and kernel time in its syscalls). Points interleaved over rounds, medians. Writes a section to
bench/results/proxy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from proxy import pct, write_section  # noqa: E402

STRATEGIES = ("per-log", "per-log-nosync", "per-log-batched", "journal", "journal+logs")
BEGIN, END = "<!-- wal:begin -->", "<!-- wal:end -->"


class PerLog:
    """One log per rollout, written on a pool of I/O threads (forge's ``RolloutLog.append``)."""

    def __init__(self, root: Path, sync: bool) -> None:
        self.root, self.sync = root, sync
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wal")

    def open(self, name: str) -> int:
        return os.open(self.root / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)

    def _append(self, fd: int, line: bytes) -> None:
        os.write(fd, line)
        if self.sync:
            os.fdatasync(fd)

    async def append(self, fd: int, line: bytes) -> None:
        await asyncio.get_running_loop().run_in_executor(self.pool, self._append, fd, line)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class Journal:
    """One journal file; a writer thread group-commits whatever was appended since its last sync.
    ``journal=False``: no journal, each batch syncs the rollout logs it wrote (per-log-batched)."""

    def __init__(self, root: Path, copies: bool, journal: bool = True) -> None:
        self.root, self.copies = root, copies
        self.fd = os.open(root / "journal.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if journal else -1
        self.pending: list[tuple[int, bytes, Callable[[], None]]] = []
        self.cond = threading.Condition()
        self.stopping = False
        self.syncs = 0
        self.thread = threading.Thread(target=self._run, name="journal", daemon=True)
        self.thread.start()

    def open(self, name: str) -> int:
        if not self.copies:
            return -1
        return os.open(self.root / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)

    async def append(self, fd: int, line: bytes) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self.cond:
            self.pending.append((fd, line, lambda: loop.call_soon_threadsafe(done.set_result, None)))
            self.cond.notify()
        await done

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.stopping:
                    self.cond.wait()
                if not self.pending:
                    return
                batch, self.pending = self.pending, []
            if self.copies:
                for fd, line, _ in batch:
                    os.write(fd, line)
            if self.fd >= 0:
                os.write(self.fd, b"".join(line for _, line, _ in batch))
                os.fdatasync(self.fd)
                self.syncs += 1
            else:
                for fd in {fd for fd, _, _ in batch}:
                    os.fdatasync(fd)
                    self.syncs += 1
            for _, _, wake in batch:
                wake()

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join()
        if self.fd >= 0:
            os.close(self.fd)


def make(strategy: str, root: Path) -> PerLog | Journal:
    if strategy == "per-log-batched":
        return Journal(root, copies=True, journal=False)
    if strategy.startswith("per-log"):
        return PerLog(root, sync=strategy == "per-log")
    return Journal(root, copies=strategy == "journal+logs")


async def point(strategy: str, root: Path, streams: int, seconds: float, record: bytes, records: int) -> dict:
    """``streams`` rollouts appending back to back for ``seconds``; each rollout a new log every ``records``."""
    wal = make(strategy, root)
    latencies: list[float] = []
    opened: list[int] = []
    counter = iter(range(10**9))

    async def rollout_loop(stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            fd = wal.open(f"{strategy}-{next(counter)}")
            opened.append(fd)
            for _ in range(records):
                if time.perf_counter() >= stop_at:
                    break
                started = time.perf_counter()
                await wal.append(fd, record)
                latencies.append(time.perf_counter() - started)

    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(rollout_loop(started + seconds) for _ in range(streams)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    syncs = getattr(wal, "syncs", 0)
    wal.close()
    for fd in opened:
        if fd >= 0:
            os.close(fd)
    latencies.sort()
    n = len(latencies)
    return {"n": n, "rate": n / wall, "p50": pct(latencies, 50), "p99": pct(latencies, 99),
            "cpu_ms": cpu / max(1, n) * 1000,
            "per_sync": n / syncs if syncs else (1.0 if strategy == "per-log" else float("nan"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement per point")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--levels", default="1,16,64", help="concurrent rollouts, comma-separated")
    parser.add_argument("--record-bytes", type=int, default=4800,
                        help="bytes per record (forge stores ~4.8 kB per call of the 21 kB extending body)")
    parser.add_argument("--records", type=int, default=8, help="appends per rollout log (calls per rollout)")
    parser.add_argument("--dir", default=None, help="where the logs go (default: the temp dir's disk)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "proxy.md"))
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    levels = [int(x) for x in args.levels.split(",")]
    record = b"x" * (args.record_bytes - 1) + b"\n"
    got: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="forge-bench-wal-", dir=args.dir) as tmp:
        for rnd in range(args.rounds):
            for level in levels:
                for strategy in STRATEGIES:
                    root = Path(tmp) / f"{rnd}-{level}-{strategy}"
                    root.mkdir()
                    r = asyncio.run(point(strategy, root, level, args.seconds, record, args.records))
                    got.setdefault((level, strategy), []).append(r)
                    print(f"round {rnd} {level:3d} {strategy:15s} {r['rate']:8.0f}/s p50 {r['p50']*1000:6.2f} "
                          f"p99 {r['p99']*1000:6.2f} ms cpu {r['cpu_ms']:.3f} ms/append "
                          f"{r['per_sync']:.1f}/sync", flush=True)

    def med(level: int, strategy: str, key: str) -> float:
        return statistics.median(r[key] for r in got[(level, strategy)])
    lines = ["## Durability: one group-committed journal per shard vs one fdatasync'd log per rollout", "",
             f"`bench/wal_sync.py` ({os.cpu_count()} cores, the disk of the temp dir; nothing else of forge "
             f"runs). The durability step alone, shaped like the proxy: an asyncio loop (uvloop) awaiting each "
             f"append of a {args.record_bytes} B record; each rollout a new log every {args.records} appends. "
             "per-log: forge today (8 I/O threads; write + fdatasync of the rollout's log). per-log-nosync: the "
             "same without the sync. per-log-batched: the same logs, one writer thread that writes each batch's "
             "records to their logs, then fdatasyncs each log it touched (what is on disk unchanged). journal: one "
             "writer thread, each batch one write + one fdatasync of one file. journal+logs: the same plus an "
             "unsynced copy of each record in its rollout's log. "
             f"Points of {args.seconds:g} s interleaved over {args.rounds} rounds, medians; CPU: the whole "
             "process per append; x per-log: CPU per append relative to per-log at the same level.", "",
             "| rollouts | strategy | appends/s | p50 ms | p99 ms | CPU ms/append | x per-log | appends/sync |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        base = med(level, "per-log", "cpu_ms")
        for strategy in STRATEGIES:
            cpu = med(level, strategy, "cpu_ms")
            per_sync = "" if strategy == "per-log-nosync" else f"{med(level, strategy, 'per_sync'):.1f}"
            lines.append(f"| {level} | {strategy} | {med(level, strategy, 'rate'):.0f} | "
                         f"{med(level, strategy, 'p50')*1000:.2f} | {med(level, strategy, 'p99')*1000:.2f} | "
                         f"{cpu:.3f} | {cpu / base:.2f} | {per_sync} |")
    write_section(Path(args.out), BEGIN, END, lines)


if __name__ == "__main__":
    main()
