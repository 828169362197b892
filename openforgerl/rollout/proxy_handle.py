"""The orchestrator's side of the recording proxy: start one in-process, or use a running one.

Invariant: the orchestrator only ever talks to the proxy through its admin API (create a rollout,
finish it, read its trajectory), whether the proxy runs in this process or elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import uvicorn
from pydantic import BaseModel, Field, SecretStr, model_validator

from openforgerl.errors import ProviderError, ProxyError
from openforgerl.rollout.proxy.allocation import ShardLoad
from openforgerl.rollout.proxy.engine import EngineConfig, VLLMEngineConfig
from openforgerl.rollout.proxy.server import QuietServer
from openforgerl.rollout.runtime import is_loopback

ADMIN_TOKEN_ENV = "FORGE_PROXY_ADMIN_TOKEN"


def _env_secret(name: str) -> SecretStr | None:
    value = os.environ.get(name)
    return SecretStr(value) if value else None


class ProxyShard(BaseModel):
    """One of several running proxies that share a run: a proxy per node, or per Kubernetes replica
    (``forge k8s proxy --replicas N`` prints these). Each owns the rollouts created on it."""

    url: str
    """Its admin API, as the orchestrator reaches it."""
    sandbox_url: str | None = None
    """Its model API, as sandboxes reach it (needed unless they share this host's network)."""


class ProxySettings(BaseModel):
    """Which recording proxy a run uses."""

    url: str | None = None
    """A running proxy (``forge proxy``); unset: start one inside this run."""
    admin_token: SecretStr | None = Field(default_factory=lambda: _env_secret(ADMIN_TOKEN_ENV))
    """The running proxy's admin token (required with ``url``); default $FORGE_PROXY_ADMIN_TOKEN. Saved
    configs show it as ``**********``: a run directory never holds it."""
    sandbox_url: str | None = None
    """With ``url``: the running proxy's model API as sandboxes reach it (``forge proxy --sandbox``
    prints it); needed unless sandboxes share this host's network (``network=host``)."""
    host: str = "127.0.0.1"
    """Where the in-run proxy's admin API (and, for ``network=host``, its model API) listens."""
    port: int = 0
    """In-run proxy port; 0 picks a free one."""
    engine: EngineConfig = Field(default_factory=VLLMEngineConfig)
    """The in-run proxy's engine (vLLM from ``forge serve`` by default)."""
    tokenizer: str | None = None
    """A tokenizer directory instead of the pulled model's."""
    force_tool_calls: int = Field(0, ge=0)
    """In-run proxy: force a tool call on the first N calls of each rollout (small policies)."""
    max_tokens: int = Field(4096, ge=0)
    """In-run proxy: the response cap per call (the default when a harness sets none, else the ceiling)."""
    max_context_tokens: int = Field(0, ge=0)
    """In-run proxy: the policy's context in tokens; a longer prompt is refused at once with the dialect's
    context-length error. 0: the engine's own (vLLM reports it), else unchecked."""
    rollout_max_tokens: int = Field(0, ge=0)
    """In-run proxy: tokens the policy may generate per rollout (0: no budget); past it, calls are length
    stops and the rollout is ``truncated``."""
    rollout_max_calls: int = Field(0, ge=0)
    """In-run proxy: model calls per rollout (0: no budget); past it, the same."""
    workers: int = Field(1, ge=0)
    """In-run proxy: processes (shards) serving the model API, each owning the rollouts created on it;
    1: one, inside this run's process; 0: one per core. More than one spreads the proxy's CPU over cores
    (each shard loads the tokenizer: ~0.3 GB of memory apiece)."""
    shards: list[ProxyShard] = Field(default_factory=list)
    """Several running proxies instead of ``url`` (one per node or Kubernetes replica, all started with
    the same admin token): each rollout is created on the one with the fewest live rollouts of this run,
    its harness gets that proxy's URL, and its finish and trajectory go to it. ``url`` and ``sandbox_url``
    then name the first shard."""

    @model_validator(mode="after")
    def _first_shard(self) -> ProxySettings:
        if not self.shards:
            return self
        first = self.shards[0]
        for key, given, value in (("url", self.url, first.url), ("sandbox_url", self.sandbox_url, first.sandbox_url)):
            if given is not None and given != value:
                raise ValueError(f"proxy.{key} is {given!r} but proxy.shards[0].{key} is {value!r}: with shards, "
                                 f"set each shard's {key} in proxy.shards and leave proxy.{key} unset")
        self.url, self.sandbox_url = first.url, first.sandbox_url
        return self


class ProxyHandle:
    """The admin client. ``base_url`` serves everything on this host's loopback; ``sandbox_urls`` are
    the model-only listeners sandboxes on other networks reach (address -> URL).

    With ``shards`` (one entry per proxy shard: ``base_url``, ``model_urls``), each rollout is created
    on the shard with the fewest live rollouts of this client, and its harness gets that shard's URLs
    (``model_url``); finish and trajectory go to the shard that owns the rollout."""

    def __init__(self, base_url: str, admin_token: str, data_dir: Path | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, sandbox_urls: dict[str, str] | None = None,
                 shards: Sequence[dict[str, Any]] = ()) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_token = admin_token
        self.data_dir = data_dir
        self.sandbox_urls = dict(sandbox_urls or {})
        if shards:
            self.shards = [{"base_url": e["base_url"].rstrip("/"), "model_urls": dict(e.get("model_urls") or {})}
                           for e in shards]
        else:  # one proxy: its listeners are sandbox_urls itself (listeners added later are seen too)
            self.shards = [{"base_url": self.base_url, "model_urls": self.sandbox_urls}]
        self._clients = [httpx.AsyncClient(base_url=e["base_url"], timeout=60, transport=transport,
                                           headers={"authorization": f"Bearer {admin_token}"})
                         for e in self.shards]
        self._http = self._clients[0]
        self.load = ShardLoad(len(self.shards))
        self._routes: dict[str, dict[str, Any]] = {}  # rollout id -> its shard's URLs, as a sharded proxy named them

    def url_for(self, address: str) -> str:
        """The model API's URL for sandboxes that reach this host at ``address`` (the first shard's)."""
        return self.urls_for(address)[0]

    def urls_for(self, address: str) -> list[str]:
        """Every shard's model API for sandboxes at ``address`` (each port must be open to them)."""
        if is_loopback(address) and address not in self.shards[0]["model_urls"]:
            return [shard["base_url"] for shard in self.shards]
        if all(address in shard["model_urls"] for shard in self.shards):
            return [shard["model_urls"][address] for shard in self.shards]
        raise ProxyError(f"the proxy has no listener for sandboxes at {address}",
                         fix="set proxy.sandbox_url to the proxy's model API as sandboxes reach it, or network=host")

    def model_url(self, url: str, rollout_id: str) -> str:
        """``url`` (a model API URL of the first shard, as ``url_for`` gave it) for the shard that owns
        ``rollout_id``: the same listener of that shard."""
        route = self._routes.get(rollout_id)
        if route is None:
            owner = self.load.owner(rollout_id) or 0
            if owner == 0:
                return url
            route = self.shards[owner]
        first = self.shards[0]
        if url.rstrip("/") == first["base_url"]:
            return route["base_url"] or url
        for address, listener in first["model_urls"].items():
            if url.rstrip("/") == listener.rstrip("/"):
                return route["model_urls"].get(address, url)
        host = urlsplit(url).hostname or ""
        return route["model_urls"].get(host, url)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None, shard: int = 0) -> dict[str, Any]:
        client = self._clients[shard]
        try:
            response = await client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ProxyError(f"proxy at {client.base_url} unreachable: {exc}",
                             fix="check forge proxy is running") from exc
        if response.status_code != 200:
            raise ProxyError(f"proxy {method} {path} -> {response.status_code}: {response.text[:300]}")
        return response.json()

    @property
    def live(self) -> list[int]:
        """Live rollouts of this client per shard."""
        return self.load.live

    def pick(self) -> int:
        """The shard for the next rollout: fewest live rollouts of this client, then fewest created."""
        return self.load.pick()

    async def create(self, metadata: dict[str, Any]) -> tuple[str, str]:
        shard = self.load.reserve()
        try:
            data = await self._call("POST", "/rollouts", {"metadata": metadata}, shard)
        except BaseException:
            self.load.cancel(shard)
            raise
        self.load.own(data["id"], shard)
        if data.get("base_url"):  # a sharded proxy's front names the shard its rollout went to
            self._routes[data["id"]] = {"base_url": str(data["base_url"]).rstrip("/"),
                                        "model_urls": dict(data.get("model_urls") or {})}
        return data["id"], data["token"]

    async def finish(self, rollout_id: str, reward: float | None, status: str, metadata: dict[str, Any]) -> dict:
        summary = await self._call("POST", f"/rollouts/{rollout_id}/finish",
                                   {"reward": reward, "status": status, "metadata": metadata},
                                   self.load.owner(rollout_id) or 0)
        self.load.finish(rollout_id)
        return summary

    async def trajectory(self, rollout_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/rollouts/{rollout_id}/trajectory", shard=self.load.owner(rollout_id) or 0)

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()


async def check_engine(settings: ProxySettings) -> None:
    """Raise ProviderError unless the model behind this run answers: a running proxy's ``/health``, or
    the in-run proxy's vLLM engine listing its models (a scripted engine always answers)."""
    if settings.shards:
        for shard in settings.shards:
            await _answers(shard.url.rstrip("/") + "/health", f"the proxy shard at {shard.url}",
                           "start it (forge k8s proxy --replicas N | kubectl apply -f -), or fix proxy.shards")
        return
    if settings.url:
        url, what = settings.url.rstrip("/") + "/health", f"the proxy at {settings.url}"
        fix = "start it (forge proxy), or unset proxy.url so the run starts its own"
    elif isinstance(settings.engine, VLLMEngineConfig):
        url = settings.engine.base_url.rstrip("/") + "/v1/models"
        what = f"the vLLM engine at {settings.engine.base_url}"
        fix = "start it (forge serve --model NAME) or point the run at one (--engine-url URL)"
    else:
        return
    await _answers(url, what, fix)


async def _answers(url: str, what: str, fix: str) -> None:
    try:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            answer = await client.get(url)
    except httpx.HTTPError as exc:
        raise ProviderError(f"{what} does not answer ({type(exc).__name__} on GET {url})", fix=fix) from exc
    if answer.status_code != 200:
        raise ProviderError(f"{what} answered GET {url} with HTTP {answer.status_code}", fix=fix)


@contextlib.asynccontextmanager
async def open_proxy(settings: ProxySettings, model: str, data_dir: Path,
                     sandbox_hosts: Sequence[str] = ()) -> AsyncIterator[ProxyHandle]:
    """The run's proxy: the running one ``settings.url`` names (or the running ``settings.shards``), or one
    started in this process that also listens on each of ``sandbox_hosts`` (model API only) for sandboxes
    on other networks."""
    if settings.url:
        if not settings.admin_token:
            raise ProxyError(f"proxy.{'shards' if settings.shards else 'url'} is set but proxy.admin_token is not",
                             fix=f"export {ADMIN_TOKEN_ENV}=<the token forge proxy was started with>")
        urls = {host: settings.sandbox_url for host in sandbox_hosts if settings.sandbox_url}
        shards = [{"base_url": shard.url,
                   "model_urls": {host: shard.sandbox_url for host in sandbox_hosts if shard.sandbox_url}}
                  for shard in settings.shards]
        handle = ProxyHandle(settings.url, settings.admin_token.get_secret_value(), sandbox_urls=urls,
                             shards=shards)
        try:
            yield handle
        finally:
            await handle.close()
        return
    async with _in_process(settings, model, data_dir, sandbox_hosts) as handle:
        yield handle


async def listen(app: Any, host: str, port: int) -> tuple[QuietServer, asyncio.Task[None], int]:
    # Quiet: Ctrl-C belongs to the run, which finishes its rollouts before the proxy goes.
    server = QuietServer(uvicorn.Config(app, host=host, port=port, http="httptools", lifespan="off",
                                    access_log=False, log_level="warning", timeout_keep_alive=120))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # raises why it could not start (port taken, ...)
            raise ProxyError(f"the in-run proxy stopped while starting on {host}:{port}")
        await asyncio.sleep(0.02)
    return server, serving, server.servers[0].sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def _in_process(settings: ProxySettings, model: str, data_dir: Path,
                      sandbox_hosts: Sequence[str]) -> AsyncIterator[ProxyHandle]:
    from openforgerl.rollout.proxy.app import ModelApi
    from openforgerl.rollout.proxy.config import ProxyConfig
    from openforgerl.rollout.proxy.server import build_app
    from openforgerl.rollout.proxy.shards import ShardSet, cores

    token = secrets.token_urlsafe(24)
    config = ProxyConfig(host=settings.host, port=settings.port, admin_token=token, model=model,
                         tokenizer=settings.tokenizer, engine=settings.engine, data_dir=str(data_dir),
                         force_tool_calls=settings.force_tool_calls, max_tokens=settings.max_tokens,
                         max_context_tokens=settings.max_context_tokens,
                         rollout_max_tokens=settings.rollout_max_tokens, rollout_max_calls=settings.rollout_max_calls)
    workers = settings.workers or cores()
    if workers > 1:
        shards = ShardSet(config, workers, model_hosts=list(sandbox_hosts), port=settings.port)
        await shards.start()
        try:
            first = shards.shards[0]
            handle = ProxyHandle(first.base_url, token, data_dir, sandbox_urls=first.model_urls,
                                 shards=shards.entries())
            try:
                yield handle
            finally:
                await handle.close()
        finally:
            await shards.stop()
        return
    app = await asyncio.to_thread(build_app, config)
    listeners: list[tuple[QuietServer, asyncio.Task[None], int]] = []
    try:
        listeners.append(await listen(app, settings.host, settings.port))
        urls = {}
        for host in sandbox_hosts:
            listeners.append(await listen(ModelApi(app), host, 0))
            urls[host] = f"http://{host}:{listeners[-1][2]}"
        handle = ProxyHandle(f"http://{settings.host}:{listeners[0][2]}", token, data_dir, sandbox_urls=urls)
        try:
            yield handle
        finally:
            await handle.close()
    finally:
        for server, serving, _ in listeners:
            server.should_exit = True
            await serving
        await app.service.aclose()  # lifespan is off: close the engine's connections ourselves
