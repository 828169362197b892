"""Assemble the proxy from its config and run it on uvicorn (uvloop + httptools)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import signal
from collections.abc import Callable, Iterator
from typing import Any, Literal

import uvicorn
import uvloop

from openforgerl.log import get_logger
from openforgerl.processes import raise_open_files_limit
from openforgerl.rollout.proxy.app import ModelApi, ProxyApp
from openforgerl.rollout.proxy.config import ProxyConfig
from openforgerl.rollout.proxy.engine import Engine, make_engine
from openforgerl.rollout.proxy.rollouts import Registry, shard_prefix
from openforgerl.rollout.proxy.service import Budget, ProxyService
from openforgerl.rollout.proxy.store import Store
from openforgerl.rollout.proxy.template import ChatTemplate, load_chat_template
from openforgerl.rollout.proxy.tool_parser import tool_parser_for
from openforgerl.rollout.trajectory import Trajectory

log = get_logger(__name__)
MIN_OPEN_FILES = 4096
"""Below this many open files (after raising the soft limit to the hard one) the proxy warns at start."""


def build_app(config: ProxyConfig, template: ChatTemplate | None = None, engine: Engine | None = None) -> ProxyApp:
    """The ASGI app for ``config``; recovers the rollouts found in ``config.data_dir``."""
    files = raise_open_files_limit()  # each rollout in flight holds a connection or two, and its log
    if files < MIN_OPEN_FILES:
        log.warning("this proxy may keep only %d files open (ulimit -n; the hard limit allows no more): about %d "
                    "rollouts in flight at once; raise the hard limit to serve more", files, files // 3)
    template = template or load_chat_template(config.model, config.tokenizer)
    template.prepare()
    parser = tool_parser_for(template, config.tool_parser)
    engine = engine or make_engine(config.engine, template, parser)
    store = Store(config.data_dir)
    store.check_writable()  # before recovery writes to logs, and before a harness is answered unrecorded
    store.replay_journal()  # what a machine crash took from the logs since the journal's last checkpoint
    registry = Registry(template, parser, store, token_prefix=shard_prefix(config.shard, config.shards))
    recovered = registry.recover()
    if recovered:
        log.info("recovered %d rollouts from %s", recovered, config.data_dir)
    service = ProxyService(template, parser, engine, registry, max_inflight=config.max_inflight,
                           force_tool_calls=config.force_tool_calls, max_tokens=config.max_tokens,
                           max_context_tokens=config.max_context_tokens,
                           budget=Budget(config.rollout_max_tokens, config.rollout_max_calls))
    return ProxyApp(service, admin_token=config.admin_token, model=config.model,
                    unknown_model=config.unknown_model, max_body_bytes=config.max_body_bytes,
                    shard=config.shard, shard_map=config.shard_map)


def recorded_trajectories(config: ProxyConfig) -> list[Trajectory]:
    """Every rollout recorded in ``config.data_dir``, read without writing to it (safe next to a running proxy)."""
    template = load_chat_template(config.model, config.tokenizer)
    registry = Registry(template, tool_parser_for(template, config.tool_parser), Store(config.data_dir))
    registry.recover(read_only=True)
    rollouts = [registry.get(rollout_id) for rollout_id in [*registry.by_id, *registry.retired]]
    return [r.trajectory for r in rollouts if r is not None]  # None: a log with no events, as recover() skips


_settled = False  # settle_heap ran in this process


def settle_heap() -> None:
    """Collect once, then take everything alive at start (tokenizer, template tables, the libraries: some
    380k objects) out of the cyclic collector's view. Otherwise each full collection walks them all: a
    100-280 ms stop of the event loop every few thousand calls, which is the proxy's p99. Objects made
    later (rollouts, segments) are collected as before; a frozen object still goes when its count drops.
    The young generation is collected after 20,000 net allocations instead of 700: a 21 kB request alone
    parses into thousands of containers, so at 700 every few calls scanned the objects of all the calls in
    flight and pushed them into older generations. Cyclic garbage waits at most that long.
    Measured (bench/results/proxy.md): paired at 16 streams, p99 8-28% lower and CPU per call 0-14% lower;
    unpaired at 64 streams, CPU per call 29-34% lower."""
    global _settled
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)
    if not _settled:  # frozen objects miss the interpreter's last collection: extension types that count their
        atexit.register(gc.unfreeze)  # instances (nanobind's, in veRL's worker) would report them as leaks
    _settled = True


def settle_heap_once() -> bool:
    """``settle_heap`` in a process that hosts proxies among its other work, the first time it is asked (True
    then). veRL's agent-loop worker builds a proxy app per rollout in its own heap (torch, veRL, Ray: ~530k
    objects) with the default thresholds: full collections over that heap stopped its event loop for ~280 ms,
    and young ones took ~8% of a call (bench/results/proxy.md, "The proxy in an agent-loop worker's heap")."""
    if _settled:
        return False
    settle_heap()
    return True


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: whoever runs it decides what a signal ends, and when."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(config: ProxyConfig, sandbox_listen: tuple[str, int] | list[tuple[str, int]] | None = None,
          ready: Callable[[list[int]], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; with ``sandbox_listen`` also the model API alone on that address,
    for sandboxes on a network that must not reach the admin API. ``ready`` gets the bound ports (main
    listener first) once every listener accepts. Returns (so the caller's cleanup runs) once every
    listener has shut down."""
    app = build_app(config)

    def listener(asgi: Any, host: str, port: int, lifespan: Literal["on", "off"]) -> QuietServer:
        return QuietServer(uvicorn.Config(asgi, host=host, port=port, lifespan=lifespan, loop="uvloop",
                                          http="httptools", access_log=False, log_level="warning",
                                          proxy_headers=False, server_header=False,
                                          timeout_keep_alive=120, backlog=4096))
    servers = [listener(app, config.host, config.port, "on")]
    model_only = sandbox_listen if isinstance(sandbox_listen, list) else [sandbox_listen] if sandbox_listen else []
    for host, port in model_only:
        servers.append(listener(ModelApi(app), host, port, "off"))

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        serving = asyncio.gather(*(server.serve() for server in servers))
        while not all(server.started for server in servers):
            if serving.done():
                break
            await asyncio.sleep(0.02)
        if not serving.done():
            settle_heap()
            if ready is not None:
                ready([server.servers[0].sockets[0].getsockname()[1] for server in servers])
        await serving
    uvloop.run(run())
