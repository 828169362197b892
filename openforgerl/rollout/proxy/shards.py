"""Shards: the proxy as N processes, each owning the rollouts created on it.

A shard is a whole proxy (its own listeners, write-ahead log directory ``<data_dir>/shard-<i>``,
recovery) whose tokens say which shard minted them. Nothing is shared between shards, so the hot
path has no lock and no router: whoever creates a rollout (the admin client, ``ProxyHandle``) picks
a shard and hands the harness that shard's base URL. A call sent to the wrong shard gets a 421
naming the right one (from ``shards.json``, written once every shard listens).

``ShardSet`` starts and supervises them: a shard that dies (kill -9, OOM) is started again on the
same ports and recovers its own rollouts from its log directory while the others keep serving; a
shard whose parent dies (the shard set's process killed) stops by itself.

Run one shard: ``python -m openforgerl.rollout.proxy.shards READY.json [HOST:PORT ...] < CONFIG.json``
(its config on stdin, so the admin token is never written to disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforgerl.errors import ProxyError
from openforgerl.log import get_logger
from openforgerl.rollout.proxy.allocation import ShardLoad
from openforgerl.rollout.proxy.config import ProxyConfig

log = get_logger(__name__)

START_TIMEOUT_SEC = 180.0
"""A shard loads its tokenizer and recovers its logs before it listens."""
RESTART_PAUSE_SEC = 1.0
"""Between restarts of a shard that keeps dying, so a broken setup does not spin."""


@dataclass
class Shard:
    index: int
    config: ProxyConfig
    model_hosts: list[str]
    model_ports: list[int]
    process: asyncio.subprocess.Process | None = None
    base_url: str = ""
    model_urls: dict[str, str] = field(default_factory=dict)
    restarts: int = 0

    def entry(self) -> dict[str, Any]:
        return {"shard": self.index, "base_url": self.base_url, "model_urls": dict(self.model_urls)}


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class ShardSet:
    """``workers`` proxy processes made from ``config``, shard ``i`` on ``port + i`` (0: any free port),
    each also serving the model API alone on every host of ``model_hosts`` (``model_port + i``; 0: free)."""

    def __init__(self, config: ProxyConfig, workers: int, model_hosts: list[str] | None = None,
                 port: int = 0, model_port: int = 0) -> None:
        if workers < 1:
            raise ProxyError(f"proxy workers must be at least 1, not {workers}")
        self.root = Path(config.data_dir)
        self.map_path = self.root / "shards.json"
        hosts = list(model_hosts or [])
        self.shards = [
            Shard(i, config.model_copy(update={
                "shard": i, "shards": workers, "shard_map": self.map_path, "data_dir": self.root / f"shard-{i}",
                "port": port + i if port else 0}), hosts,
                [model_port + i if model_port else 0 for _ in hosts])
            for i in range(workers)]
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.map_path.unlink(missing_ok=True)
        try:
            await asyncio.gather(*(self._spawn(shard) for shard in self.shards))
        except BaseException:
            await self.stop()
            raise
        self._write_map()
        self._supervisor = asyncio.create_task(self._supervise())

    def entries(self) -> list[dict[str, Any]]:
        return [shard.entry() for shard in self.shards]

    def _write_map(self) -> None:
        tmp = self.map_path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps({"shards": self.entries()}, option=orjson.OPT_INDENT_2))
        tmp.replace(self.map_path)

    async def _spawn(self, shard: Shard) -> None:
        index = shard.index
        ready = self.root / f"shard-{index}.ready"
        ready.unlink(missing_ok=True)
        listens = [f"{host}:{port}" for host, port in zip(shard.model_hosts, shard.model_ports, strict=True)]
        with open(self.root / f"shard-{index}.log", "ab") as err:
            shard.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "openforgerl.rollout.proxy.shards", str(ready), *listens,
                stdin=asyncio.subprocess.PIPE, stdout=err, stderr=err, start_new_session=True)
        assert shard.process.stdin is not None
        shard.process.stdin.write(shard.config.model_dump_json().encode())  # on a pipe: the admin token never
        shard.process.stdin.write_eof()                                   # touches the disk
        await shard.process.stdin.drain()
        shard.process.stdin.close()
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while not ready.exists():
            if shard.process.returncode is not None or time.monotonic() > deadline:
                if shard.process.returncode is None:
                    shard.process.kill()
                    await shard.process.wait()
                tail = (self.root / f"shard-{index}.log").read_text(errors="replace")[-600:]
                raise ProxyError(f"proxy shard {index} did not start (exit {shard.process.returncode}): {tail.strip()}",
                                 fix=f"see {self.root / f'shard-{index}.log'}")
            await asyncio.sleep(0.05)
        ports = orjson.loads(ready.read_bytes())["ports"]
        host = shard.config.host
        shard.config = shard.config.model_copy(update={"port": ports[0]})  # a restart comes back on the same ports
        shard.model_ports = list(ports[1:])
        shard.base_url = f"http://{host}:{ports[0]}"
        shard.model_urls = {h: f"http://{h}:{p}" for h, p in zip(shard.model_hosts, shard.model_ports, strict=True)}

    async def _supervise(self) -> None:
        waits = {asyncio.ensure_future(s.process.wait()): s for s in self.shards if s.process is not None}
        while waits and not self._closing:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                shard = waits.pop(finished)
                if self._closing:
                    return
                log.warning("proxy shard %d exited (%s); starting it again on %s", shard.index,
                            finished.result(), shard.base_url)
                shard.restarts += 1
                await asyncio.sleep(RESTART_PAUSE_SEC)
                try:
                    await self._spawn(shard)
                except ProxyError as exc:
                    log.error("%s", exc)
                    await asyncio.sleep(RESTART_PAUSE_SEC * 5)
                if shard.process is not None:
                    waits[asyncio.ensure_future(shard.process.wait())] = shard
        for pending in waits:
            pending.cancel()

    async def stop(self) -> None:
        """SIGTERM every shard (each finishes its answers and closes its logs), SIGKILL what lingers."""
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        live = [s.process for s in self.shards if s.process is not None and s.process.returncode is None]
        for process in live:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)), 30)
        except TimeoutError:
            for process in live:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await asyncio.gather(*(p.wait() for p in live))


def main(argv: list[str]) -> None:
    from openforgerl.rollout.proxy.server import serve

    config = ProxyConfig.model_validate_json(sys.stdin.buffer.read())
    ready = Path(argv[0])
    listens = []
    for spec in argv[1:]:
        host, _, port = spec.rpartition(":")
        listens.append((host, int(port)))

    parent = os.getppid()

    def orphaned() -> None:  # the shard set's process died (kill -9): stop as on SIGTERM, logs closed cleanly
        while os.getppid() == parent:
            time.sleep(1.0)
        log.warning("proxy shard %d: its parent process is gone; stopping", config.shard)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=orphaned, name="forge-shard-parent", daemon=True).start()

    def announce(ports: list[int]) -> None:
        tmp = ready.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps({"pid": os.getpid(), "ports": ports}))
        tmp.replace(ready)
    serve(config, sandbox_listen=listens, ready=announce)


if __name__ == "__main__":
    main(sys.argv[1:])


class ShardFront:
    """The admin API of a sharded ``forge proxy`` (ASGI): creates each rollout on the least loaded shard
    and answers with its token and that shard's URLs (``base_url``, ``model_urls``); routes finish and
    trajectory reads to the owning shard; ``/health`` sums the shards. Model calls are not served here
    (no router on the hot path): they get a 421 naming the shard their token belongs to."""

    def __init__(self, shards: ShardSet, admin_token: str) -> None:
        import httpx

        self.shards, self.admin_token = shards, admin_token
        self.clients = [httpx.AsyncClient(base_url=s.base_url, timeout=60, trust_env=False,
                                          headers={"authorization": f"Bearer {admin_token}"}) for s in shards.shards]
        self.load = ShardLoad(len(self.clients))

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from openforgerl.rollout.proxy.app import ClientGone, HttpError, error_body, send_json

        if scope["type"] != "http":
            return
        try:
            await self._http(scope, receive, send)
        except HttpError as exc:
            await send_json(send, exc.status, error_body(None, exc))
        except ClientGone:
            return

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import hmac

        from openforgerl.rollout.proxy.app import HttpError, api_key, is_model_route, read_body, send_json
        from openforgerl.rollout.proxy.rollouts import token_shard

        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        headers = dict(scope["headers"])
        if method == "GET" and path == "/health":
            return await self._health(send)
        if method == "GET" and path == "/v1/models":
            answer = await self.clients[0].get("/v1/models")
            return await send_json(send, answer.status_code, answer.json())
        if is_model_route(path):
            owner = token_shard(api_key(headers))
            where = (self.shards.shards[owner].base_url if owner is not None and owner < len(self.shards.shards)
                     else "the base_url POST /rollouts returned with the token")
            raise HttpError(421, f"this proxy runs {len(self.clients)} shards and serves model calls on each "
                                 f"rollout's own shard: send them to {where}", "misdirected_request")
        if path != "/rollouts" and not path.startswith("/rollouts/"):
            raise HttpError(404, f"no route {method} {path[:200]}", "not_found_error")
        if not hmac.compare_digest((api_key(headers) or "").encode(), self.admin_token.encode()):
            raise HttpError(401, "admin routes need the admin token as a Bearer token", "authentication_error")
        body = await read_body(receive, headers, 32 * 1024 * 1024)
        parts = path.split("/")[1:]
        if method == "POST" and parts == ["rollouts"]:
            return await self._create(body, send)
        if method == "GET" and parts == ["rollouts"]:
            listed = []
            for client in self.clients:
                listed += (await client.get("/rollouts")).json().get("rollouts", [])
            return await send_json(send, 200, {"rollouts": listed})
        rollout_id = parts[1] if len(parts) >= 2 else ""
        for shard in self._owners(rollout_id):
            answer = await self.clients[shard].request(method, path, content=body,
                                                       headers={"content-type": "application/json"})
            if answer.status_code == 404 and self.load.owner(rollout_id) is None:
                continue  # not this shard's (the front restarted and forgot): ask the next
            if method == "POST" and parts[2:] == ["finish"] and answer.status_code == 200:
                self.load.finish(rollout_id)
            return await send_json(send, answer.status_code, answer.json())
        raise HttpError(404, f"no route {method} {path[:200]} (or no such rollout)", "not_found_error")

    def _owners(self, rollout_id: str) -> list[int]:
        owner = self.load.owner(rollout_id)
        return [owner] if owner is not None else list(range(len(self.clients)))

    async def _create(self, body: bytes, send: Any) -> None:
        from openforgerl.rollout.proxy.app import send_json

        shard = self.load.reserve()
        try:
            answer = await self.clients[shard].post("/rollouts", content=body or b"{}",
                                                    headers={"content-type": "application/json"})
        except BaseException:
            self.load.cancel(shard)
            raise
        data = answer.json()
        if answer.status_code != 200:
            self.load.cancel(shard)
            return await send_json(send, answer.status_code, data)
        self.load.own(data["id"], shard)
        await send_json(send, 200, {**data, **self.shards.shards[shard].entry()})

    async def _health(self, send: Any) -> None:
        from openforgerl.rollout.proxy.app import send_json

        shards, ok = [], True
        for index, client in enumerate(self.clients):
            try:
                answer = await client.get("/health", timeout=5)
                shards.append(answer.json())
                ok = ok and answer.status_code == 200
            except Exception as exc:  # noqa: BLE001  (a shard restarting: reported, not raised)
                shards.append({"shard": index, "status": f"down: {type(exc).__name__}"})
                ok = False
        await send_json(send, 200 if ok else 503, {
            "status": "ok" if ok else "degraded", "model": shards[0].get("model") if shards else None,
            "workers": len(shards), "rollouts": sum(s.get("rollouts", 0) for s in shards),
            "live": sum(s.get("live", 0) for s in shards), "inflight": sum(s.get("inflight", 0) for s in shards),
            "shards": shards})


def serve_sharded(config: ProxyConfig, workers: int, model_listen: tuple[str, int] | None = None,
                  on_listen: Any = None) -> None:
    """``forge proxy --workers N``: N shards on ``config.port + 1 ..`` (each also serving the model API alone
    on ``model_listen``'s host, port + i), the admin front on ``config.host:config.port``; until SIGINT/SIGTERM."""
    import uvicorn
    import uvloop

    from openforgerl.rollout.proxy.server import QuietServer

    async def run() -> None:
        hosts = [model_listen[0]] if model_listen else []
        shards = ShardSet(config, workers, model_hosts=hosts, port=config.port + 1 if config.port else 0,
                          model_port=model_listen[1] if model_listen else 0)
        await shards.start()
        front = ShardFront(shards, config.admin_token)
        server = QuietServer(uvicorn.Config(front, host=config.host, port=config.port, lifespan="off",
                                            loop="uvloop", http="httptools", access_log=False,
                                            log_level="warning"))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        try:
            if on_listen is not None:
                on_listen(shards)
            await server.serve()
        finally:
            await front.aclose()
            await shards.stop()
    uvloop.run(run())
