"""Group commit: the proxy's writes share one fdatasync per batch through a journal per store, and what
a machine crash takes from the (unsynced) rollout logs comes back from the journal on start.

A machine crash is simulated by cutting the logs back (what the page cache would have lost) after the
writer was killed with -9; the journal itself was synced before each event was acknowledged.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import orjson
import pytest

from openforgerl.errors import ResourceError
from openforgerl.rollout.proxy.store import JOURNALS, Journal, RolloutLog, Store, parse_events, read_journal


def logs(store: Store) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted(store.root.glob("*.log"))}


def journal_bytes(store: Store) -> int:
    return sum((store.root / name).stat().st_size for name in JOURNALS if (store.root / name).exists())


async def write_rollouts(store: Store, rollouts: int, events: int) -> None:
    async def one(i: int) -> None:
        log = store.open_log(f"r{i}", new=True)
        await store.journal.append(log, {"t": "open", "id": f"r{i}", "token_sha": "x"})
        for n in range(events):
            await store.journal.append(log, {"t": "call", "i": n, "text": f"{i}-{n}" * 40})
    await asyncio.gather(*(one(i) for i in range(rollouts)))


def test_events_written_together_share_one_sync_and_each_lands_in_its_own_log(tmp_path, monkeypatch):
    store = Store(tmp_path)
    synced = Journal._write

    def slow(self, blob):  # a disk whose sync takes 20 ms: what is queued meanwhile goes in one batch
        synced(self, blob)
        time.sleep(0.02)
    monkeypatch.setattr(Journal, "_write", slow)
    asyncio.run(write_rollouts(store, rollouts=16, events=4))
    journal = store.journal
    assert journal.events == 16 * 5
    assert journal.batches <= 16  # one sync per ~5+ events, not one per event (80)
    for name, data in logs(store).items():
        events = parse_events(data, name)
        assert [e["t"] for e in events] == ["open"] + ["call"] * 4 and [e["i"] for e in events[1:]] == [0, 1, 2, 3]
    generation, entries = read_journal(journal.path.read_bytes())
    assert generation == 1 and len(entries) == 80
    assert all(logs(store)[rid][off:off + len(line)] == line for rid, off, line in entries)
    store.close()
    assert journal_bytes(store) == 0  # closed after a checkpoint: the logs hold everything


def crashed(tmp_path) -> tuple[Store, dict[str, bytes]]:
    """A store of 4 rollouts as a machine crash before the journal's checkpoint can leave it, and its logs
    as they were: a log cut mid-line, a log cut at a line end with zeros after it (its size was updated,
    its data never written), a new log gone, one intact."""
    store = Store(tmp_path)
    asyncio.run(write_rollouts(store, rollouts=4, events=6))
    before = logs(store)
    root = store.root
    (root / "r0.log").write_bytes(before["r0"][: len(before["r0"]) // 2])
    cut = before["r1"].index(b"\n", 300) + 1
    (root / "r1.log").write_bytes(before["r1"][:cut] + b"\0" * 500)
    (root / "r2.log").unlink()
    return store, before


def test_a_machine_crash_loses_nothing_the_journal_holds(tmp_path):
    store, before = crashed(tmp_path)
    restored = Store(tmp_path).replay_journal()
    assert restored > 0 and logs(store) == before
    assert journal_bytes(store) == 0
    assert Store(tmp_path).replay_journal() == 0 and logs(store) == before  # replay is idempotent


def test_reading_after_a_machine_crash_sees_what_the_journal_holds_without_writing(tmp_path):
    # An export of a crashed proxy's data dir before the proxy restarts: the journal is not replayed
    # (the reader writes nothing) but what it reads is what a replay would leave.
    store, before = crashed(tmp_path)
    root = store.root
    damaged, journal = logs(store), {name: (root / name).read_bytes() for name in JOURNALS if (root / name).exists()}
    reader = Store(tmp_path)
    assert dict(reader.scan()) == before
    assert all(reader.read(rid) == parse_events(data, rid) for rid, data in before.items())
    assert logs(store) == damaged and reader._journal is None
    assert {name: (root / name).read_bytes() for name in journal} == journal
    # Once the proxy replays, a reader finds nothing more in the journal and the same events in the logs.
    assert Store(tmp_path).replay_journal() > 0
    assert dict(Store(tmp_path).scan()) == before == logs(store)


def test_a_torn_or_corrupt_journal_tail_is_where_replay_stops(tmp_path):
    store = Store(tmp_path)
    asyncio.run(write_rollouts(store, rollouts=1, events=3))
    journal = store.journal.path
    data = journal.read_bytes()
    _, entries = read_journal(data)
    assert len(entries) == 4
    store.close()  # checkpoint: the journal is empty, the logs synced
    full = logs(store)["r0"]
    # A crash mid-batch: the journal's last entry half written (never synced, never acknowledged) and
    # the log holding only the first two events.
    journal.write_bytes(data[: len(data) - 10])
    (store.root / "r0.log").write_bytes(full[: entries[2][1]])
    assert Store(tmp_path).replay_journal() == 1  # the third event; the torn fourth is not brought back
    assert [e["i"] for e in parse_events(logs(store)["r0"], "r0")[1:]] == [0, 1]
    # A flipped byte inside an entry: its crc fails, replay stops there.
    bad = bytearray(data)
    bad[len(bad) - 5] ^= 0xFF
    assert len(read_journal(bytes(bad))[1]) == 3


def test_a_journal_that_cannot_be_written_cuts_its_batch_off_the_logs_and_fails_each_waiter(tmp_path, monkeypatch):
    store = Store(tmp_path)
    log = store.open_log("r", new=True)
    asyncio.run(store.journal.append(log, {"t": "open", "id": "r", "token_sha": "x"}))
    before = (store.root / "r.log").read_bytes()

    def full(self, blob):
        os.write(self._fds[self._active], blob[: len(blob) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Journal, "_write", full)

    async def two() -> list:
        return await asyncio.gather(*(store.journal.append(log, {"t": "call", "i": i}) for i in range(2)),
                                    return_exceptions=True)
    errors = asyncio.run(two())
    assert all(isinstance(e, ResourceError) and "no space left on device" in str(e) for e in errors)
    assert (store.root / "r.log").read_bytes() == before
    monkeypatch.undo()
    asyncio.run(store.journal.append(log, {"t": "call", "i": 0}))
    assert [e["t"] for e in parse_events(logs(store)["r"], "r")] == ["open", "call"]
    assert Store(tmp_path).replay_journal() == 0 and [e["t"] for e in parse_events(logs(store)["r"], "r")] == [
        "open", "call"]


def test_past_its_size_the_journal_goes_on_in_the_other_file_while_a_checkpoint_empties_the_full_one(
        tmp_path, monkeypatch):
    store = Store(tmp_path)
    journal = store._journal = Journal(store, checkpoint_bytes=1024)
    synced = []
    sync = RolloutLog._sync
    monkeypatch.setattr(RolloutLog, "_sync", staticmethod(lambda fd: (synced.append(fd), sync(fd))))
    asyncio.run(write_rollouts(store, rollouts=3, events=10))  # ~7 kB
    deadline = time.monotonic() + 10
    while journal._checkpoint is not None and journal._checkpoint.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    # (a rotation waits for the last checkpoint: how many there were depends on the disk's speed)
    assert journal.generation >= 2 and journal.checkpoints == journal.generation - 1 and synced
    assert journal.paths[1 - journal._active].stat().st_size == 0
    journal.checkpoint_bytes = 1 << 30
    asyncio.run(write_rollouts_more(store, "r0", 10, 11))
    assert read_journal(journal.path.read_bytes())[0] == journal.generation
    assert [len(parse_events(data, name)) for name, data in logs(store).items()] == [12, 11, 11]
    before = logs(store)
    (store.root / "r0.log").write_bytes(before["r0"][:-100])  # what the active file covers comes back
    assert Store(tmp_path).replay_journal() >= 1 and logs(store) == before


def test_replay_takes_the_older_generation_first(tmp_path):
    store = Store(tmp_path)
    journal = store._journal = Journal(store, checkpoint_bytes=1 << 30)
    asyncio.run(write_rollouts(store, rollouts=1, events=2))
    first = journal.path.read_bytes()
    journal._rotate()  # a checkpoint that never ran (the machine went down first)
    journal._checkpoint.join()
    asyncio.run(write_rollouts_more(store, "r0", 2, 4))
    second = journal.path.read_bytes()
    before = logs(store)["r0"]
    store.root.joinpath(JOURNALS[0]).write_bytes(first)  # as it was before its checkpoint
    store.root.joinpath(JOURNALS[1]).write_bytes(second)
    (store.root / "r0.log").unlink()
    assert Store(tmp_path).replay_journal() == 5 and logs(store)["r0"] == before


async def write_rollouts_more(store: Store, rollout: str, start: int, end: int) -> None:
    log = store.open_log(rollout)
    for n in range(start, end):
        await store.journal.append(log, {"t": "call", "i": n, "text": f"0-{n}" * 40})


WRITER = textwrap.dedent("""
    import asyncio, sys
    from openforgerl.rollout.proxy.store import Store

    async def main():
        store = Store(sys.argv[1])
        inline = sys.argv[2] == "inline"
        async def one(i):
            log = store.open_log(f"r{i}", new=True)
            await store.journal.append(log, {"t": "open", "id": f"r{i}", "token_sha": "x"})
            n = 0
            while True:
                await store.journal.append(log, {"t": "call", "i": n, "text": "y" * (97 * n % 900)},
                                           inline=inline and i % 2 == 0)
                print(f"r{i} {n}", flush=True)
                n += 1
        await asyncio.gather(*(one(i) for i in range(8)))
    asyncio.run(main())
""")


@pytest.mark.parametrize("mode", ["queued", "inline"])
def test_kill_9_mid_batch_then_lost_page_cache_keeps_every_acknowledged_event_once(tmp_path, mode):
    """``inline``: half the rollouts ask to commit on the loop, which they do whenever the writer is idle,
    the others queue meanwhile: the two paths take turns on one journal file."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), mode], stdout=subprocess.PIPE, text=True)
    acked: list[str] = []
    assert proc.stdout is not None
    while len(acked) < 400:
        line = proc.stdout.readline()
        assert line, "the writer died"
        acked.append(line)
    os.kill(proc.pid, signal.SIGKILL)  # mid-batch: it was writing all along
    acked += proc.stdout.readlines()
    proc.wait()
    root = tmp_path / "rollouts"
    rng = random.Random(7)
    for path in root.glob("*.log"):  # the machine went down too: each log keeps a random prefix
        data = path.read_bytes()
        path.write_bytes(data[: rng.randrange(len(data) + 1)])
    Store(tmp_path).replay_journal()
    for rollout, ids in group(acked).items():
        events = parse_events((root / f"{rollout}.log").read_bytes(), rollout)
        calls = [e["i"] for e in events if e["t"] == "call"]
        assert events[0]["t"] == "open" and calls == list(range(len(calls)))  # in order, each once
        assert set(ids) <= set(calls)  # every acknowledged call is there
        assert all(e["text"] == "y" * (97 * e["i"] % 900) for e in events[1:])


def group(lines: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in lines:
        rollout, n = line.split()
        out.setdefault(rollout, []).append(int(n))
    return out


@pytest.mark.parametrize("events", [0, 1])
def test_a_store_only_read_never_starts_a_journal(tmp_path, events):
    store = Store(tmp_path)
    if events:
        asyncio.run(write_rollouts(store, rollouts=1, events=1))
        store.close()
    reader = Store(tmp_path)
    list(reader.scan())
    assert reader._journal is None
    assert orjson.loads(logs(store)["r0"].splitlines()[0])["t"] == "open" if events else logs(store) == {}


def test_an_inline_append_commits_on_the_callers_thread_when_the_writer_is_idle_and_queues_behind_a_batch(
        tmp_path, monkeypatch):
    store = Store(tmp_path)
    log = store.open_log("r", new=True)
    writes, hold = [], threading.Event()
    write = Journal._write

    def traced(self, blob):
        writes.append(threading.current_thread().name)
        if writes[-1] == "forge-journal":
            assert hold.wait(10)
        write(self, blob)
    monkeypatch.setattr(Journal, "_write", traced)

    async def run() -> None:
        await store.journal.append(log, {"t": "open", "id": "r", "token_sha": "x"}, inline=True)
        assert writes == ["MainThread"] and store.journal.inline == 1
        assert len(read_journal(store.journal.path.read_bytes())[1]) == 1  # durable on return
        queued = asyncio.ensure_future(store.journal.append(log, {"t": "call", "i": 0}))
        while not writes[1:]:  # the writer holds its batch
            await asyncio.sleep(0.001)
        behind = asyncio.ensure_future(store.journal.append(log, {"t": "call", "i": 1}, inline=True))
        await asyncio.sleep(0.01)
        assert not behind.done() and store.journal.inline == 1  # it waits its turn instead
        hold.set()
        await asyncio.gather(queued, behind)
        with pytest.raises(TypeError):  # an event that cannot be encoded fails its caller alone
            await store.journal.append(log, {"t": "call", "i": 2, "x": object()}, inline=True)
        await store.journal.append(log, {"t": "call", "i": 2}, inline=True)
    asyncio.run(run())
    assert writes == ["MainThread", "forge-journal", "forge-journal", "MainThread"]
    assert [e.get("i") for e in parse_events(logs(store)["r"], "r")] == [None, 0, 1, 2]
    store.close()
    assert Store(tmp_path).replay_journal() == 0


def test_a_lone_call_commits_its_record_on_the_loop_and_calls_under_way_together_queue_theirs(monkeypatch):
    """At one stream nothing else waits on the event loop, so the call's record skips the hand-offs to the
    journal's writer and back; with another call under way the writer commits it, off the loop."""
    from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn
    from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
    from openforgerl.rollout.proxy.tool_parser import make_tool_parser
    from openforgerl.testing.proxy import CharTemplate, InProcessProxy

    class Together(ScriptedEngine):
        """Streams once ``want`` calls are at the engine."""
        want, at = 1, 0

        async def stream(self, prompt_ids, sampling):
            self.at += 1
            while self.at < self.want:
                await asyncio.sleep(0.001)
            async for chunk in super().stream(prompt_ids, sampling):
                yield chunk

    template = CharTemplate()
    engine = Together(ScriptedEngineConfig(turns=[ScriptTurn(text="ok")]), template=template,
                      tool_parser=make_tool_parser("hermes"))
    proxy = InProcessProxy(engine=engine, template=template)
    asked: list[bool] = []
    append = Journal.append

    async def spy(self, log, event, inline=False):
        if event["t"] == "call":
            asked.append(inline)
        await append(self, log, event, inline)
    monkeypatch.setattr(Journal, "append", spy)

    async def scenario() -> list[dict]:
        async with proxy.client() as client:
            rollouts = [await proxy.new_rollout(client) for _ in range(2)]

            async def call(token: str) -> None:
                resp = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                                         json={"model": "m", "messages": [{"role": "user", "content": "go"}]})
                assert resp.status_code == 200, resp.text
            await call(rollouts[0][1])  # alone
            engine.want, engine.at = 2, 0
            await asyncio.gather(*(call(token) for _, token in rollouts))  # two under way at once
            return [await proxy.trajectory(client, rollout_id) for rollout_id, _ in rollouts]
    trajectories = asyncio.run(scenario())
    # the first of the two to commit has the other under way (the second may find itself alone by then)
    assert len(asked) == 3 and asked[0] is True and asked[1] is False
    assert [len(t["calls"]) for t in trajectories] == [2, 1]
    assert proxy.registry.store.journal.inline >= 1
