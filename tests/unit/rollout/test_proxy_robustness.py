"""The proxy under hostile and heavy load: huge prompts, a full or read-only disk, bad admin input.

Everything here is behavioural and deterministic: a slow prompt is a template that blocks on an
event, a full disk is an OSError(ENOSPC) injected at the log's write (root writes through chmod, and
these tests must not mount anything), a read-only disk an injected EROFS at the start-up probe.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from types import SimpleNamespace

import orjson
import pytest

from openforgerl.errors import ProviderError, ResourceError
from openforgerl.rollout.proxy.conversation import BadRequest, Sampling
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn, VLLMEngineConfig
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
from openforgerl.rollout.proxy.engines.vllm import VLLMEngine
from openforgerl.rollout.proxy.store import Journal, RolloutLog, Store
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.chat import CharTemplate
from openforgerl.testing.closing_server import ClosingServer
from openforgerl.testing.proxy import ADMIN_TOKEN, PATHS, InProcessProxy, parse_sse

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
DIALECTS = ["chat", "responses", "messages"]
LIMIT = 300


def run(coro):
    return asyncio.run(coro)


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def body(dialect: str, text: str, stream: bool = False, **extra) -> dict:
    if dialect == "responses":
        return {"model": "smollm2", "input": text, "stream": stream, **extra}
    shape = {"model": "smollm2", "messages": [{"role": "user", "content": text}], "stream": stream, **extra}
    return dict(shape, max_tokens=50) if dialect == "messages" else shape


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def log_lines(proxy: InProcessProxy, rollout_id: str) -> list[dict]:
    """Every line of the rollout's log, each of which must be whole JSON."""
    raw = (proxy.data_dir / "rollouts" / f"{rollout_id}.log").read_bytes()
    assert raw.endswith(b"\n")
    return [orjson.loads(line) for line in raw.splitlines()]


# -- a huge prompt does not stall the proxy ----------------------------------------------------


class GatedTemplate(CharTemplate):
    """Renders a conversation that mentions GATE only once ``gate`` is set: a prompt that takes as long
    to plan as the test wants, without any clock."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = threading.Event(), threading.Event()

    def render(self, messages, tools, add_generation_prompt):
        if any("GATE" in str(m.get("content")) for m in messages):
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        return super().render(messages, tools, add_generation_prompt)


def test_while_one_prompt_is_planned_health_and_other_rollouts_are_served_and_its_rollout_waits_its_turn():
    template = GatedTemplate()
    proxy = InProcessProxy([ScriptTurn(text="ok")], template=template)

    async def scenario():
        async with proxy.client() as client:
            a_id, a_token = await proxy.new_rollout(client)
            _, b_token = await proxy.new_rollout(client)
            slow = asyncio.create_task(client.post(PATHS["chat"], json=body("chat", "GATE"), headers=auth(a_token)))
            assert await asyncio.to_thread(template.entered.wait, 30)
            health = await client.get("/health")
            other = await client.post(PATHS["chat"], json=body("chat", "hi"), headers=auth(b_token))
            same = asyncio.create_task(client.post(PATHS["chat"], json=body("chat", "later"), headers=auth(a_token)))
            for _ in range(50):
                await asyncio.sleep(0)
            waiting = not slow.done() and not same.done()  # its planning holds the rollout's queue
            template.gate.set()
            return health, other, waiting, await slow, await same, await proxy.trajectory(client, a_id)

    health, other, waiting, slow, same, trajectory = run(scenario())
    assert health.status_code == 200 and health.json()["inflight"] == 0  # planned, not begun
    assert other.status_code == 200 and waiting
    assert slow.status_code == same.status_code == 200
    # the rollout's calls are planned in arrival order, and each answer carries its own call index
    assert slow.json()["id"].endswith("-0") and same.json()["id"].endswith("-1")
    assert [c["status"] for c in trajectory["calls"]] == ["ok", "ok"]


class CountingTemplate(CharTemplate):
    """Remembers the longest text it was asked to tokenise."""

    def __init__(self) -> None:
        super().__init__()
        self.longest = 0

    def encode(self, text):
        self.longest = max(self.longest, len(text))
        return super().encode(text)


def assert_context_error(dialect: str, resp) -> str:
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"] == "application/json"  # refused before any stream started
    error = resp.json()["error"]
    if dialect == "messages":
        assert resp.json()["type"] == "error" and error["type"] == "invalid_request_error"
        assert error["message"].startswith("prompt is too long: ") and error["message"].endswith(f"> {LIMIT} maximum")
    else:
        assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
        assert f"maximum context length is {LIMIT} tokens" in error["message"]
    return error["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_prompt_over_the_context_is_refused_in_the_callers_words_and_a_huge_one_is_never_tokenised(dialect, stream):
    template = CountingTemplate()
    proxy = InProcessProxy([ScriptTurn(text="ok")], template=template, max_context_tokens=LIMIT)

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            fits = await client.post(PATHS[dialect], json=body(dialect, "hi", stream), headers=auth(token))
            over = await client.post(PATHS[dialect], json=body(dialect, "x" * 400, stream), headers=auth(token))
            huge = await client.post(PATHS[dialect], json=body(dialect, "y" * 200_000, stream), headers=auth(token))
            health = await client.get("/health")
            return rollout_id, fits, over, huge, health, await proxy.trajectory(client, rollout_id)

    rollout_id, fits, over, huge, health, trajectory = run(scenario())
    assert fits.status_code == 200
    assert_context_error(dialect, over)
    message = assert_context_error(dialect, huge)
    assert dialect == "messages" or "at least" in message  # counted by its characters, not its tokens
    assert template.longest < 10_000  # 200k characters over a 300-token context: refused without tokenising
    assert health.json()["inflight"] == 0 and len(trajectory["calls"]) == 1
    assert [e["t"] for e in log_lines(proxy, rollout_id)] == ["open", "start", "call"]  # refusals leave no trace


def test_the_vllm_engines_model_card_sets_the_context(monkeypatch):
    engine = VLLMEngine(VLLMEngineConfig(base_url="http://127.0.0.1:9"))
    assert engine._card(b'{"data": [{"id": "smollm2", "max_model_len": 4096}]}')["max_model_len"] == 4096

    async def card():
        return "smollm2", LIMIT

    async def never(*_):
        raise AssertionError("a prompt over the context reached the engine")
    monkeypatch.setattr(engine, "_model_info", card)
    monkeypatch.setattr(engine, "_post", never)
    proxy = InProcessProxy(engine=engine)

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            return [await client.post(PATHS[d], json=body(d, "x" * 400), headers=auth(token)) for d in DIALECTS]

    for dialect, resp in zip(DIALECTS, run(scenario()), strict=True):
        assert_context_error(dialect, resp)


ENGINE_SSE = (b'data: {"choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-0.5, -0.25]}, '
              b'"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')


def closing_engine(drop_all: bool = False) -> ClosingServer:
    """A vLLM stand-in that closes a kept-alive connection as the next turn arrives on it (``drop_all``: every
    turn's connection is closed unanswered: an engine that dies at each request)."""
    return ClosingServer(ENGINE_SSE, "text/event-stream", drop_all,
                         always={b"GET /v1/models": b'{"data": [{"id": "m", "max_model_len": 4096}]}'})


def test_a_turn_sent_on_a_connection_the_engine_just_closed_is_sent_again_on_a_fresh_one():
    async def scenario(engine_side: ClosingServer):
        server, url = await engine_side.start()
        engine = VLLMEngine(VLLMEngineConfig(base_url=url, model="m"))
        try:
            turns = []
            for _ in range(3):
                try:
                    turns.append([chunk.token_ids async for chunk in engine.stream([1, 2, 3], Sampling(max_tokens=8))])
                except ProviderError as exc:
                    turns.append(str(exc))
            return turns
        finally:
            await engine.aclose()
            server.close()

    closing = closing_engine()
    assert run(scenario(closing)) == [[[5, 6]]] * 3  # every turn answered, none lost to a closed connection
    # turns 2 and 3: each dropped on the connection the turn before kept alive (this peer drops every second
    # request of a connection), then sent again on a new one
    assert (closing.answered, closing.dropped) == (3, 2)
    dead = closing_engine(drop_all=True)
    turns = run(scenario(dead))
    assert all(isinstance(t, str) and "failed to stream" in t and "ServerDisconnected" in t for t in turns), turns
    assert (dead.answered, dead.dropped) == (0, 6)  # sent twice per turn, not retried without end


def test_count_tokens_counts_up_to_the_context_and_refuses_beyond_it():
    proxy = InProcessProxy(max_context_tokens=LIMIT)

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            path, key = "/v1/messages/count_tokens", {"x-api-key": token}
            small = await client.post(path, json=body("messages", "hi"), headers=key)
            over = await client.post(path, json=body("messages", "x" * 400), headers=key)
            deep = await client.post(path, headers=key, json=dict(body("messages", "hi"), tools=[
                {"name": "f", "input_schema": {"type": "object", "properties": nested(300)}}]))
            return small, over, deep

    small, over, deep = run(scenario())
    assert small.status_code == 200 and 0 < small.json()["input_tokens"] < LIMIT
    assert_context_error("messages", over)
    assert deep.status_code == 400 and deep.json()["type"] == "error"  # nothing re-serialised it into a 500


# -- bad admin and dialect input is a one-line 400 ------------------------------------------


BAD_IDS = ["../../x", "", ".hidden", "a/b", "a\x00b", "x" * 129, 5, 1.5, True, [1], {"a": 1}]


def test_rollout_ids_metadata_and_finish_bodies_are_checked(tmp_path):
    proxy = InProcessProxy(data_dir=tmp_path / "data")

    async def scenario():
        async with proxy.client() as client:
            bad = [await client.post("/rollouts", json={"id": i}, headers=ADMIN) for i in BAD_IDS]
            metadata = [await client.post("/rollouts", json={"metadata": m}, headers=ADMIN)
                        for m in ([1], "text", 3, {"deep": nested(200)})]
            good = await client.post("/rollouts", json={"id": "task-1.attempt_0", "metadata": None}, headers=ADMIN)
            again = await client.post("/rollouts", json={"id": "task-1.attempt_0"}, headers=ADMIN)
            finish = f"/rollouts/{good.json()['id']}/finish"
            finishes = [await client.post(finish, json=b, headers=ADMIN) for b in (
                {"metadata": [1]}, {"metadata": "x"}, {"reward": "1"}, {"reward": True}, {"status": 3},
                {"metadata": {"deep": nested(200)}})]
            done = await client.post(finish, json={"reward": 0.5, "status": "completed"}, headers=ADMIN)
            proxy.registry.keep_finished = 0  # the finished rollout leaves memory; its id stays taken
            other = await proxy.new_rollout(client)
            await client.post(f"/rollouts/{other[0]}/finish", json={}, headers=ADMIN)
            reused = await client.post("/rollouts", json={"id": "task-1.attempt_0"}, headers=ADMIN)
            return bad, metadata, good, again, finishes, done, reused

    bad, metadata, good, again, finishes, done, reused = run(scenario())
    for resp in bad + metadata + finishes:
        assert resp.status_code == 400, resp.text
        assert "\n" not in resp.json()["error"]["message"]
    assert "letters, digits" in bad[0].json()["error"]["message"]
    assert "metadata must be an object" in metadata[0].json()["error"]["message"]
    assert good.status_code == 200 and good.json()["id"] == "task-1.attempt_0"
    assert again.status_code == reused.status_code == 409
    assert done.status_code == 200 and done.json()["reward"] == 0.5
    logs = sorted(p.name for p in tmp_path.rglob("*.log"))
    assert len(logs) == 2 and "task-1.attempt_0.log" in logs  # nothing written outside rollouts/


def test_rollouts_created_at_once_with_one_id_give_one_rollout_and_409s(tmp_path):
    """A rollout's log file is created in a worker thread (off the event loop): creates of one id that overlap
    there still make one rollout, whose log has one ``open`` event; the others get 409 and remove nothing."""
    proxy = InProcessProxy(data_dir=tmp_path / "data")

    async def scenario():
        async with proxy.client() as client:
            answers = await asyncio.gather(*(client.post("/rollouts", json={"id": "task-7"}, headers=ADMIN)
                                             for _ in range(8)))
            won = [a for a in answers if a.status_code == 200]
            chat = await client.post(PATHS["chat"], json={"messages": [{"role": "user", "content": "hi"}]},
                                     headers={"authorization": f"Bearer {won[0].json()['token']}"})
            return answers, chat

    answers, chat = run(scenario())
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7
    assert all("exists already" in a.json()["error"]["message"] for a in answers if a.status_code == 409)
    assert chat.status_code == 200
    events = [orjson.loads(line) for line in (tmp_path / "data" / "rollouts" / "task-7.log").read_text().splitlines()]
    assert [e["t"] for e in events].count("open") == 1 and events[-1]["t"] == "call"



@pytest.mark.parametrize("stream", [False, True])
def test_responses_parallel_tool_calls_must_be_a_bool_and_is_echoed(stream):
    proxy = InProcessProxy()

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            return [await client.post(PATHS["responses"], headers=auth(token),
                                      json=body("responses", "hi", stream, parallel_tool_calls=value))
                    for value in (nested(300), "yes", False)]

    deep, text, false = run(scenario())
    assert deep.status_code == text.status_code == 400 and "parallel_tool_calls" in deep.json()["error"]["message"]
    final = parse_sse(false.content)[-1][1]["response"] if stream else false.json()
    assert final["parallel_tool_calls"] is False


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_policy_that_samples_absurdly_nested_tool_calls_gets_them_back_as_text(dialect, stream):
    calls = [f'<tool_call>\n{{"name": "f", "arguments": {"[" * depth + "]" * depth}}}\n</tool_call>'
             for depth in (300, 3000)]
    proxy = InProcessProxy([ScriptTurn(text=c) for c in calls])

    async def scenario():
        async with proxy.client() as client:
            _, token = await proxy.new_rollout(client)
            return [await client.post(PATHS[dialect], json=body(dialect, "hi", stream), headers=auth(token))
                    for _ in calls]

    for resp in run(scenario()):
        assert resp.status_code == 200
        if stream:
            last = parse_sse(resp.content)[-1]
            assert last[1] == "[DONE]" or last[0] in ("message_stop", "response.completed", "response.incomplete")


# -- a full or read-only disk ---------------------------------------------------------------


@pytest.fixture
def disk(monkeypatch):
    """A disk that fills up on demand: ``full`` fails every write with ENOSPC; ``sync_full`` lets the
    bytes reach the file and fails their fdatasync (delayed allocation), so the write must be cut back."""
    state = SimpleNamespace(full=False, sync_full=False)
    write, journal_write = RolloutLog._write, Journal._write

    def failing(self, line, sync):
        if state.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(self, line, sync and not state.sync_full)
        if sync and state.sync_full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def journal_failing(self, blob):  # the proxy's writes: log unsynced, then the journal's one sync
        if state.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if state.sync_full:
            os.write(self._fds[self._active], blob)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        journal_write(self, blob)
    monkeypatch.setattr(RolloutLog, "_write", failing)
    monkeypatch.setattr(Journal, "_write", journal_failing)
    return state


def assert_storage_error(dialect: str, resp) -> None:
    assert resp.status_code == 507, resp.text
    error = resp.json()["error"]
    assert "no space left on device" in error["message"] and "\n" not in error["message"]
    assert resp.json()["type"] == "error" if dialect == "messages" else error["type"] == "server_error"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_when_the_disk_fills_calls_get_507_nothing_stays_in_flight_and_finish_works_once_space_is_back(
        disk, dialect, stream):
    proxy = InProcessProxy([ScriptTurn(text="hello")])

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            disk.sync_full = True
            call = await client.post(PATHS[dialect], json=body(dialect, "hi", stream), headers=auth(token))
            health = await client.get("/health")
            finish_full = await client.post(f"/rollouts/{rollout_id}/finish", json={"reward": 1.0}, headers=ADMIN)
            still_open = await proxy.trajectory(client, rollout_id)
            disk.sync_full = False
            finish = await client.post(f"/rollouts/{rollout_id}/finish", json={"reward": 1.0}, headers=ADMIN)
            return rollout_id, call, health, finish_full, still_open, finish

    rollout_id, call, health, finish_full, still_open, finish = run(scenario())
    if stream:  # the answer was already streaming: it ends with the dialect's own error event
        assert call.status_code == 200
        name, data = parse_sse(call.content)[-1]
        assert name in ("error", "response.failed") and "no space left on device" in orjson.dumps(data).decode()
    else:
        assert_storage_error(dialect, call)
    assert health.json()["inflight"] == 0
    assert finish_full.status_code == 507 and "no space left" in finish_full.json()["error"]["message"]
    assert still_open["status"] == "running"
    assert finish.status_code == 200 and finish.json()["reward"] == 1.0
    assert [(c["status"], c["error"][:13]) for c in finish.json()["calls"]] == [("interrupted", "not recorded:")]
    assert [e["t"] for e in log_lines(proxy, rollout_id)] == ["open", "start", "finish"]  # failed writes cut off
    restarted = InProcessProxy(data_dir=proxy.data_dir)
    recovered = restarted.registry.get(rollout_id)
    assert recovered is not None and [c.status for c in recovered.trajectory.calls] == ["interrupted"]
    assert recovered.trajectory.reward == 1.0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_full_disk_refuses_new_calls_and_rollouts_before_anything_begins(disk, dialect):
    proxy = InProcessProxy()

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            disk.full = True
            call = await client.post(PATHS[dialect], json=body(dialect, "hi", True), headers=auth(token))
            create = await client.post("/rollouts", json={"id": "later"}, headers=ADMIN)
            listed = await client.get("/rollouts", headers=ADMIN)
            disk.full = False
            again = await client.post("/rollouts", json={"id": "later"}, headers=ADMIN)
            return rollout_id, call, create, listed, again, await proxy.trajectory(client, rollout_id)

    rollout_id, call, create, listed, again, trajectory = run(scenario())
    assert_storage_error(dialect, call)  # even a stream: its start could not be written, so it never started
    assert create.status_code == 507 and "later" not in [r["id"] for r in listed.json()["rollouts"]]
    assert again.status_code == 200  # the failed create left no log behind to collide with
    assert trajectory["calls"] == [] and [e["t"] for e in log_lines(proxy, rollout_id)] == ["open"]


def test_a_write_cut_short_by_a_full_disk_is_removed_from_the_log(tmp_path, monkeypatch):
    log = RolloutLog(tmp_path / "r.log")
    log.append({"t": "open", "id": "r"})
    before = (tmp_path / "r.log").read_bytes()

    def half(self, line, sync):
        os.write(self._fd, line[: len(line) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(RolloutLog, "_write", half)
    with pytest.raises(ResourceError, match="no space left on device; fix: free space"):
        log.append({"t": "start", "i": 0})
    assert (tmp_path / "r.log").read_bytes() == before
    monkeypatch.undo()
    log.append({"t": "start", "i": 0})
    assert [orjson.loads(line)["t"] for line in (tmp_path / "r.log").read_bytes().splitlines()] == ["open", "start"]


def test_a_data_dir_that_cannot_be_written_stops_the_start_with_one_line(tmp_path, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "missing")
    for data_dir in (a_file / "data", dangling / "data"):  # real: no such directory can be made there
        with pytest.raises(ResourceError) as raised:
            InProcessProxy(data_dir=data_dir)
        message = str(raised.value)
        assert str(data_dir) in message and "; fix: " in message and "\n" not in message

    def read_only(fd):  # injected: a read-only mount needs privileges these tests must not use
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(os, "fsync", read_only)
    with pytest.raises(ResourceError, match=r"rollouts: the filesystem is read-only; fix: remount it read-write, "
                                            r"or pass another --data-dir"):
        InProcessProxy(data_dir=tmp_path / "ro")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0555")
def test_a_read_only_data_dir_stops_the_start_with_one_line(tmp_path):
    (tmp_path / "ro" / "rollouts").mkdir(parents=True)
    (tmp_path / "ro" / "rollouts").chmod(0o555)
    with pytest.raises(ResourceError, match="permission denied; fix: "):
        Store(tmp_path / "ro").check_writable()


# -- calls that end in odd places ------------------------------------------------------------


class RefusingEngine(ScriptedEngine):
    """An engine that refuses every call as a 400 would (vLLM: bad parameters)."""

    async def stream(self, prompt_ids, sampling):
        raise BadRequest("the engine refused the request: max_tokens is too large")
        yield  # an async generator, as engines are


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_the_engine_refuses_is_a_400_recorded_without_its_prompt(stream):
    template = CharTemplate()
    engine = RefusingEngine(ScriptedEngineConfig(), template=template, tool_parser=make_tool_parser("hermes"))
    proxy = InProcessProxy(engine=engine, template=template)

    async def scenario():
        async with proxy.client() as client:
            rollout_id, token = await proxy.new_rollout(client)
            resp = await client.post(PATHS["chat"], json=body("chat", "x" * 1000, stream), headers=auth(token))
            health = await client.get("/health")
            return rollout_id, resp, health, await proxy.trajectory(client, rollout_id)

    rollout_id, resp, health, trajectory = run(scenario())
    assert resp.status_code == 400 and "max_tokens is too large" in resp.json()["error"]["message"]
    assert health.json()["inflight"] == 0
    assert [c["status"] for c in trajectory["calls"]] == ["engine_error"]
    record = log_lines(proxy, rollout_id)[-1]
    assert record["t"] == "call" and record["p"] == "" and record["tel"]["tokens_in"] > 1000


def test_a_call_cancelled_while_its_record_is_written_is_recorded_once(monkeypatch):
    proxy = InProcessProxy([ScriptTurn(text="ok")])
    entered, release = threading.Event(), threading.Event()
    write = RolloutLog._write

    def slow(self, line, sync):
        if b'"t":"call"' in line:
            entered.set()
            release.wait(30)
        write(self, line, sync)
    monkeypatch.setattr(RolloutLog, "_write", slow)
    # Through the journal's writer thread, as with other calls under way: a lone call's inline commit holds
    # the event loop for its write, so nothing could cancel it there before the write ends.
    append = Journal.append
    monkeypatch.setattr(Journal, "append", lambda self, log, event, inline=False: append(self, log, event))

    async def scenario():
        async with proxy.client() as client:
            rollout_id, _ = await proxy.new_rollout(client)
        rollout = proxy.registry.by_id[rollout_id]
        request = proxy.app.dialects["chat"].parse(body("chat", "hi"))

        async def harness():
            async for _ in proxy.app.service.turn(rollout, request, "chat", time.perf_counter()):
                pass
        task = asyncio.create_task(harness())
        assert await asyncio.to_thread(entered.wait, 30)
        task.cancel()  # the harness hangs up while the record is being made durable
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rollout.in_flight, "the harness's cancel waited for the write"
        release.set()
        while rollout.in_flight:  # the record's write goes on without its caller
            await asyncio.sleep(0.01)
        return rollout_id, rollout

    rollout_id, rollout = run(asyncio.wait_for(scenario(), 60))
    assert [c.status for c in rollout.trajectory.calls] == ["ok"] and len(rollout.trajectory.segments) == 1
    assert [e["t"] for e in log_lines(proxy, rollout_id)] == ["open", "start", "call"]
    assert not any(h.busy for h in rollout.lineage.heads.values())

