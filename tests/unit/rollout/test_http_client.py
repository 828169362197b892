"""The proxy's engine client (``http_client.Pool``) against a small HTTP/1.1 peer: streaming, reuse, what is
never reused, time limits, bad answers, the pool's bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from openforgerl.rollout.proxy.http_client import BadResponse, Pool, ServerDisconnected


class Peer:
    """Answers each request by ``script(path, body)``: a list of raw byte pieces, sent with ``gap_s`` between
    them. Counts connections; records how each ended."""

    def __init__(self, script, gap_s: float = 0.0) -> None:
        self.script, self.gap_s = script, gap_s
        self.connections = 0
        self.requests: list[tuple[int, bytes, bytes]] = []  # connection number, request line, body
        self.closed_by_client: list[int] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                line = head.split(b"\r\n")[0]
                self.requests.append((number, line, body))
                for piece in self.script(line.split(b" ")[1], body):
                    writer.write(piece)
                    await writer.drain()
                    if self.gap_s:
                        await asyncio.sleep(self.gap_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client.append(number)
        finally:
            writer.close()


def chunked(*pieces: bytes) -> list[bytes]:
    return [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            *(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces), b"0\r\n\r\n"]


def whole(body: bytes, status: int = 200) -> list[bytes]:
    return [b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%b" % (status, len(body), body)]


def test_streamed_pieces_arrive_as_sent_and_one_connection_serves_request_after_request():
    async def scenario():
        peer = Peer(lambda path, body: chunked(b"data: 1\n\n", b"data: 2\n\n", body), gap_s=0.02)
        pool = Pool(await peer.start() + "/prefix", keepalive_s=5)
        got = []
        for n in range(3):
            async with await pool.request("POST", "/v1/completions", b"call %d" % n) as resp:
                got.append((resp.status, [piece async for piece in resp]))
        await pool.aclose()
        peer.server.close()
        return peer, got

    peer, got = asyncio.run(scenario())
    assert got[2] == (200, [b"data: 1\n\n", b"data: 2\n\n", b"call 2"])  # a piece each, as they came
    assert peer.connections == 1 and [r[1] for r in peer.requests] == [b"POST /prefix/v1/completions HTTP/1.1"] * 3


def test_an_answer_left_unread_closes_its_connection_so_the_engine_stops_generating():
    async def scenario():
        peer = Peer(lambda path, body: chunked(*[b"token"] * 20), gap_s=0.02)
        pool = Pool(await peer.start())
        async with await pool.request("POST", "/v1/completions", b"{}") as resp:
            first = await anext(resp)  # the caller stops here (its client went away)
        await asyncio.sleep(0.2)
        closed = list(peer.closed_by_client)
        async with await pool.request("GET", "/v1/models") as resp:
            rest = await resp.read()
        await pool.aclose()
        peer.server.close()
        return first, closed, rest, peer

    first, closed, rest, peer = asyncio.run(scenario())
    assert first == b"token" and closed == [1]  # the engine saw the first connection close mid-answer
    assert rest == b"token" * 20 and peer.connections == 2  # the next request did not get that connection


def test_a_drained_answer_ends_for_its_caller_at_once_and_its_connection_serves_the_next_request():
    async def scenario():  # the engine's last token, then (1 s later here: a loaded machine) [DONE] and the end
        peer = Peer(lambda path, body: chunked(b"data: last token\n\n", b"data: [DONE]\n\n"), gap_s=1.0)
        pool = Pool(await peer.start(), max_connections=1)
        async with await pool.request("POST", "/v1/completions", b"{}") as resp:
            last = await anext(resp)
            resp.drain()  # the caller has what it needs
        pooled_at_once = len(pool._idle)
        await asyncio.sleep(2.5)  # the rest arrives, read without the caller
        pooled_after = len(pool._idle)
        async with await asyncio.wait_for(pool.request("GET", "/v1/models"), 2) as resp:  # the one slot is free
            await resp.read()
        await pool.aclose()
        peer.server.close()
        return last, pooled_at_once, pooled_after, peer

    last, pooled_at_once, pooled_after, peer = asyncio.run(scenario())
    assert last == b"data: last token\n\n" and pooled_at_once == 0 and pooled_after == 1
    assert peer.connections == 1 and peer.closed_by_client == []  # read to its end: kept, not cut


def test_a_drained_answer_whose_rest_never_comes_is_closed_at_the_deadline_and_gives_its_slot_back():
    async def scenario():
        peer = Peer(lambda path, body: chunked(b"data: last token\n\n", *[b"slow"] * 50), gap_s=0.1)
        pool = Pool(await peer.start(), timeout_s=0.5, max_connections=1)
        async with await pool.request("POST", "/v1/completions", b"{}") as resp:
            await anext(resp)
            resp.drain()
        await asyncio.sleep(1.0)
        peer.script = lambda path, body: whole(b"next")
        async with await asyncio.wait_for(pool.request("GET", "/v1/models"), 2) as resp:
            after = await resp.read()
        await pool.aclose()
        peer.server.close()
        return after, peer

    after, peer = asyncio.run(scenario())
    assert after == b"next" and peer.connections == 2 and peer.closed_by_client == [1]


def test_an_idle_connection_past_its_keepalive_is_not_reused():
    async def scenario():
        peer = Peer(lambda path, body: whole(b"ok"))
        pool = Pool(await peer.start(), keepalive_s=0.1)
        for pause in (0, 0.3):
            await asyncio.sleep(pause)
            async with await pool.request("GET", "/health") as resp:
                assert await resp.read() == b"ok"
        await pool.aclose()
        peer.server.close()
        return peer.connections

    assert asyncio.run(scenario()) == 2


def test_a_request_closed_unanswered_is_sent_once_more_on_a_new_connection_and_then_fails():
    async def scenario():
        peer = Peer(lambda path, body: [])  # reads each request and closes at the next read: never answers
        peer.serve = drop_at_once(peer)
        pool = Pool(await peer.start())
        with pytest.raises(ServerDisconnected, match="before answering"):
            await pool.request("POST", "/v1/completions", b"{}")
        free = pool._slots._value
        await pool.aclose()
        peer.server.close()
        return peer, free

    peer, free = asyncio.run(scenario())
    assert len(peer.requests) == 2 and peer.connections == 2 and free == 512  # twice, then the slot is given back


def drop_at_once(peer: Peer):
    async def serve(reader, writer):
        peer.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        peer.requests.append((peer.connections, head.split(b"\r\n")[0], b""))
        writer.close()
    return serve


def test_a_whole_request_is_bounded_by_timeout_s_and_its_slot_is_given_back():
    async def scenario():
        peer = Peer(lambda path, body: chunked(*[b"slow"] * 50), gap_s=0.1)  # 5 s of answer
        pool = Pool(await peer.start(), timeout_s=0.5, max_connections=1)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="0.5 s"):
            async with await pool.request("POST", "/v1/completions", b"{}") as resp:
                async for _ in resp:
                    pass
        took = time.monotonic() - started
        peer.script = lambda path, body: whole(b"next")
        async with await asyncio.wait_for(pool.request("GET", "/v1/models"), 2) as resp:  # the one slot is free
            after = await resp.read()
        await pool.aclose()
        peer.server.close()
        return took, after

    took, after = asyncio.run(scenario())
    assert 0.4 < took < 2 and after == b"next"


def test_max_connections_bounds_requests_at_once():
    async def scenario():
        peer = Peer(lambda path, body: chunked(b"a", b"b"), gap_s=0.2)
        pool = Pool(await peer.start(), max_connections=2)

        async def call():
            async with await pool.request("POST", "/v1/completions", b"{}") as resp:
                return await resp.read()
        started = time.monotonic()
        answers = await asyncio.gather(*(call() for _ in range(3)))
        took = time.monotonic() - started
        await pool.aclose()
        peer.server.close()
        return answers, took, peer.connections

    answers, took, connections = asyncio.run(scenario())
    assert answers == [b"ab"] * 3 and connections == 2 and took > 0.7  # the third waited for a free one


def test_bytes_that_are_not_http_fail_the_request_with_bad_response():
    async def scenario():
        peer = Peer(lambda path, body: [b"SSH-2.0-OpenSSH\r\n\r\n"])
        pool = Pool(await peer.start())
        try:
            with pytest.raises(BadResponse, match="not HTTP/1.1"):
                await pool.request("GET", "/v1/models")
        finally:
            await pool.aclose()
            peer.server.close()

    asyncio.run(scenario())


def test_a_caller_cancelled_while_waiting_closes_the_connection_and_gives_its_slot_back():
    async def scenario():
        peer = Peer(lambda path, body: [])
        pool = Pool(await peer.start(), max_connections=1)
        task = asyncio.ensure_future(pool.request("POST", "/v1/completions", b"{}"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)
        free = pool._slots._value
        await pool.aclose()
        peer.server.close()
        return free, peer.closed_by_client

    assert asyncio.run(scenario()) == (1, [1])


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://x", "http://"])
def test_a_base_url_that_is_not_http_is_refused_at_once(url):
    with pytest.raises(ValueError, match="not an http"):
        Pool(url)
