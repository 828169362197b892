"""A fake Kubernetes cluster on one port: kmock's in-memory API server, a simulated kubelet, and real pod exec.

``async with FakeCluster() as cluster:`` serves, at ``cluster.url``, the Kubernetes REST API (kmock's
``KubernetesEmulator``, made a little more faithful: server-set metadata, label and field selectors, watch
timeouts, no event lost between a watch's initial listing and its live events) and the exec subresource in the
real ``v4.channel.k8s.io`` websocket protocol, so the official client and any other speak to it unchanged.

The kubelet watches pods like a real one and patches their status: Running after ``start_delay`` (or
ErrImagePull then ImagePullBackOff for an image in ``missing_images``), Failed with DeadlineExceeded once
``spec.activeDeadlineSeconds`` has passed. With ``isolation="namespaces"`` (root) each pod is a keepalive process
in its own mount and PID namespaces with a fresh tmpfs on each of ``POD_PATHS``; an exec enters them with
``nsenter``. With ``isolation="none"`` an exec is a plain subprocess in a per-pod temp directory (cheap enough for
a thousand pods).

Invariant: every process the cluster starts belongs to a pod the API still holds and is killed, with its process
group, when the pod is deleted, passes its deadline, or the cluster exits, and an exec'd command is killed as soon
as its client leaves; so after ``__aexit__`` nothing it started is left running (with ``isolation="none"``, which
has no PID namespace to sweep, a process that left its process group, e.g. with ``setsid``, escapes).

Run: ``python -m openforgerl.testing.kube --port 8443 --kubeconfig kube.yaml [--isolation none]``
(prints ``ready URL`` once it listens, serves until SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import datetime
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import aiohttp
import attrs
import kmock
import uvloop
import yaml
from aiohttp import web

POD_PATHS = ["/logs", "/tests", "/installed-agent", "/app", "/home/agent", "/solution", "/forge", "/tmp"]
"""Paths each pod gets a fresh tmpfs on, as a container has its own (its /tmp too: exec state lives there)."""
CHANNEL_PROTOCOL = "v4.channel.k8s.io"
IMAGE_BACKOFF_S = 0.3  # how long ErrImagePull shows before ImagePullBackOff
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
PODS = kmock.resource("", "v1", "pods")
logger = logging.getLogger(__name__)
_ALL_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}
_RESOURCES = {  # declared so that listing an empty resource answers an empty list, not 404 (namespaces themselves
    # are not served: kmock cannot parse their paths; objects may be created in any namespace)
    "v1/pods": ("Pod", True, {"status", "exec", "log"}),
    "v1/services": ("Service", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/secrets": ("Secret", True, set()),
    "v1/serviceaccounts": ("ServiceAccount", True, set()),
    "v1/events": ("Event", True, set()),
    "networking.k8s.io/v1/networkpolicies": ("NetworkPolicy", True, set()),
}


@dataclass
class ExecFaults:
    """Faults the exec endpoint injects; mutable, so a test can change them between calls."""

    reject_upgrades_429: int = 0  # the next N upgrade attempts get 429 (Retry-After: 0)
    reject_upgrades_500: int = 0  # then the next N get 500
    drop_after_bytes: int | None = None  # close the connection (no close frame) after that many stdout bytes
    omit_status: bool = False  # end with a close frame but no status on channel 3


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bad_request(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=400, reason="BadRequest", message=message,
                                 details={"causes": [{"reason": "FieldValueInvalid", "message": message}]})


_SET_TERM = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_EQ_TERM = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_KEY_TERM = re.compile(r"^(?P<op>!?)\s*(?P<key>[^\s!=(),]+)$")


class _Selector:
    """A label selector and a field selector together, as list and watch apply them.

    Labels: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``.
    Fields: ``path=v``, ``path==v``, ``path!=v`` on any dotted path of the object (``metadata.name``).
    """

    def __init__(self, labels: str, fields: str) -> None:
        self.labels = [self._parse(term, labels=True) for term in self._terms(labels)]
        self.fields = [self._parse(term, labels=False) for term in self._terms(fields)]

    @staticmethod
    def _terms(selector: str) -> list[str]:
        return [term.strip() for term in re.split(r",(?![^()]*\))", selector) if term.strip()]

    @staticmethod
    def _parse(term: str, *, labels: bool) -> tuple[str, str, frozenset[str]]:
        """``(key, op, values)``; op is one of ``= != in notin exists !``."""
        if m := _EQ_TERM.match(term):
            return m["key"], "!=" if m["op"] == "!=" else "=", frozenset([m["value"]])
        if labels and (m := _SET_TERM.match(term)):
            return m["key"], m["op"], frozenset(v.strip() for v in m["values"].split(","))
        if labels and (m := _KEY_TERM.match(term)):
            return m["key"], m["op"] or "exists", frozenset()
        raise _bad_request(f"unable to parse requirement: {term!r}")

    @staticmethod
    def _holds(value: str | None, op: str, values: frozenset[str]) -> bool:
        if op in ("=", "in"):
            return value in values
        if op in ("!=", "notin"):
            return value not in values
        return (value is not None) == (op == "exists")

    @staticmethod
    def _field(obj: Mapping[str, Any], path: str) -> str:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return "" if value is None else str(value)

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return (all(self._holds(labels.get(key), op, values) for key, op, values in self.labels)
                and all(self._holds(self._field(obj, key), op, values) for key, op, values in self.fields))


@attrs.define(kw_only=True)
class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator plus what clients of a real API server rely on.

    Creation sets ``metadata.uid``, ``creationTimestamp``, ``resourceVersion`` (one counter, bumped on every
    change), a name from ``generateName`` and a Pending status for pods. List and watch honour ``labelSelector``
    and ``fieldSelector``; a watch ends after ``timeoutSeconds`` and subscribes before it lists, so no change
    falls between its ADDED snapshot and its live events (``resourceVersion`` is not honoured: every watch
    starts with the current objects as ADDED).
    """

    _revision: int = attrs.field(default=0, init=False)

    def next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    async def _handle(self, request: kmock.Request) -> web.StreamResponse:
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if isinstance(meta, dict) and request.action == kmock.action.CREATE:
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                if request.namespace is not None:
                    meta["namespace"] = request.namespace
                meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), resourceVersion=self.next_revision())
                if request.resource == PODS:
                    data["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            elif isinstance(meta, dict) and request.action == kmock.action.UPDATE:
                meta["resourceVersion"] = self.next_revision()
        try:
            return await super()._handle(request)
        finally:
            # kmock keeps every request for assertions and matches each new one against all of them (quadratic);
            # an API server for a thousand pods keeps only the requests in flight.
            for requests in [self._requests, *(payload._requests for payload in self._payloads)]:
                with contextlib.suppress(ValueError):
                    requests.remove(request)

    def _stored(self, request: kmock.Request, *, deleted: bool = False) -> dict[str, Any]:
        """The object a create, fetch, update or delete addressed (its last state if ``deleted``), by key."""
        assert request.resource is not None  # kmock routes only API requests here
        meta = request.data.get("metadata", {}) if isinstance(request.data, dict) else {}
        namespace: str | None = request.namespace or meta.get("namespace")
        key: kmock.ObjectKey = (request.resource, namespace, str(request.name or meta.get("name")))
        if key not in self._objects or (self._objects[key].deleted and not deleted):
            plural = request.resource.plural
            raise kmock.KubernetesError(status=404, reason="NotFound", details={"name": key[2], "kind": plural},
                                        message=f'{plural} "{key[2]}" not found')
        obj = self._objects[key]
        raw: dict[str, Any] = obj.last.raw if deleted else obj.raw
        return raw

    # kmock's own versions of these scan every stored object on each request.
    async def _serve_fetch(self, request: kmock.Request) -> kmock.Payload:
        return self._stored(request)

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        return self._stored(request)

    async def _serve_update(self, request: kmock.Request) -> kmock.Payload:
        return self._stored(request, deleted=True)  # a patch that removes the last finalizer deletes

    async def _serve_delete(self, request: kmock.Request) -> kmock.Payload:
        return self._stored(request, deleted=True)

    def live(self, resource: kmock.resource, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
        """The stored objects of ``resource`` (``None`` namespace or name: any), not deleted."""
        return [obj.raw for (res, ns, nm), obj in self._objects.items()
                if res == resource and not obj.deleted
                and (namespace is None or ns == namespace) and (name is None or nm == name)]

    async def patch_object(self, resource: kmock.resource, namespace: str, name: str,
                           patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into a stored object and tell watchers (MODIFIED), as an API write would."""
        async with self._lock:
            key = (resource, namespace, name)
            if key not in self._objects or self._objects[key].deleted:
                raise LookupError(f"{resource.plural} {namespace}/{name} does not exist")
            self._objects[key].patch({**patch, "metadata": {**(patch.get("metadata") or {}),
                                                            "resourceVersion": self.next_revision()}})
            raw: dict[str, Any] = self._objects[key].raw
            await self._buses[resource].put({"type": "MODIFIED", "object": raw})
        return raw

    async def subscribe(self, resource: kmock.resource) -> AsyncGenerator[dict[str, Any], None]:
        """Every event on ``resource`` from now on (subscribed when this returns, not when iterated)."""
        bus = self._buses[resource]
        mark = await bus.mark()

        async def events() -> AsyncGenerator[dict[str, Any], None]:
            try:
                async for event in bus.stream(since=mark):
                    yield event
            finally:
                await bus.unmark(mark)

        return events()

    @staticmethod
    def _matcher(request: kmock.Request) -> _Selector:
        return _Selector(request.params.get("labelSelector") or "", request.params.get("fieldSelector") or "")

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        assert request.resource is not None  # kmock routes only API requests here
        if request.resource not in self._get_resources():
            raise kmock.KubernetesResourceNotFoundError()
        match = self._matcher(request)
        async with self._lock:
            items = [obj for obj in self.live(request.resource, request.namespace, None) if match(obj)]
        group, version = request.resource.group, request.resource.version
        return {"apiVersion": f"{group}/{version}" if group else version,
                "metadata": {"resourceVersion": str(self._revision)}, "items": items}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        resource = request.resource
        assert resource is not None  # kmock routes only API requests here
        match = self._matcher(request)
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        yield b""  # the headers go out now, even if nothing ever changes
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        events = await self.subscribe(resource)  # before the snapshot: a change in between shows in both
        try:
            async with self._lock:
                snapshot = self.live(resource, request.namespace, request.name)
            for obj in snapshot:
                if match(obj):
                    yield {"type": "ADDED", "object": obj}
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return
                try:
                    event = await asyncio.wait_for(events.__anext__(), remaining)
                except TimeoutError:
                    return
                meta = event.get("object", {}).get("metadata", {})
                if ((request.namespace is None or meta.get("namespace") == request.namespace)
                        and (request.name is None or meta.get("name") == request.name) and match(event["object"])):
                    yield event
        finally:
            await events.aclose()


@dataclass(eq=False)
class _Pod:
    """The kubelet's record of a pod it runs."""

    namespace: str
    name: str
    uid: str
    spec: dict[str, Any]
    keepalive: asyncio.subprocess.Process | None = None  # the ``unshare`` process (isolation="namespaces")
    init_pid: int | None = None  # PID 1 of the pod's PID namespace, as the host sees it
    scratch: Path | None = None  # the pod's working directory (isolation="none")
    execs: set[asyncio.subprocess.Process] = field(default_factory=set)  # exec'd commands still running
    groups: set[int] = field(default_factory=set)  # process groups that outlived their command (isolation="none")
    started: str = ""
    running: bool = False  # started and not killed: exec may enter it

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("containers") or [])


def _kill_group(pgid: int) -> None:
    """SIGKILL a process group (every process started here leads one: each starts a new session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _status(code: int, reason: str, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.json_response(body, status=code, headers=headers)


def _exit_status(command: list[str], code: int) -> dict[str, Any]:
    """The v1 Status an API server sends on channel 3 when the exec'd command ends with ``code``."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command "
                       f"[{' '.join(command)}], exit code {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def _call_key(method: str, path: str, query: Mapping[str, str]) -> str:
    """``VERB resource[/subresource]`` for an API request (``VERB path`` for discovery)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:] if parts[0] == "apis" else []
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return f"{method} {path}"
    subresource = "/".join(rest[2:])
    verb = ("WATCH" if method == "GET" and query.get("watch") in ("true", "1")
            else "EXEC" if subresource == "exec" else method)
    return f"{verb} {rest[0]}" + (f"/{subresource}" if subresource else "")


class _Dropped(Exception):
    """The drop_after_bytes fault fired."""


class FakeCluster:
    """A Kubernetes API server with a simulated kubelet and exec, on one aiohttp port (see the module doc)."""

    def __init__(self, *, isolation: Literal["namespaces", "none"] = "namespaces", start_delay: float = 0.0,
                 missing_images: Collection[str] = (), faults: ExecFaults | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.isolation, self.start_delay, self.missing_images = isolation, start_delay, set(missing_images)
        self.faults = faults if faults is not None else ExecFaults()
        self.host, self.port = host, port
        self.url = ""
        self.emulator = _Emulator()
        for name, (kind, namespaced, subresources) in _RESOURCES.items():
            self.emulator.resources[name] = kmock.ResourceInfo(kind=kind, singular=kind.lower(),
                                                               namespaced=namespaced, verbs=_ALL_VERBS,
                                                               subresources=subresources)
        self.processes: dict[tuple[str, str], int] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._calls: collections.Counter[str] = collections.Counter()
        self._work: asyncio.Queue[tuple[str, tuple[str, str], str]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()
        self._ips = 0
        self._scratch_root: Path | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def __aenter__(self) -> FakeCluster:
        if self.isolation == "namespaces":
            for path in POD_PATHS:
                Path(path).mkdir(parents=True, exist_ok=True)
        else:
            self._scratch_root = Path(tempfile.mkdtemp(prefix="fake-kube-"))
        await self.emulator.__aenter__()
        events = await self.emulator.subscribe(PODS)
        self._tasks = [asyncio.create_task(self._watch_pods(events)), asyncio.create_task(self._kubelet())]
        app = web.Application(middlewares=[self._count], client_max_size=64 << 20)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}/exec", self._exec)
        app.router.add_route("*", "/{tail:.*}", self._delegate)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.25, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{self.port}"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        for timer in self._timers:
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        procs = [proc for pod in self._pods.values() for proc in [pod.keepalive, *pod.execs] if proc is not None]
        for key in list(self._pods):
            self._forget(key)
        if self._runner is not None:
            await self._runner.cleanup()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(proc.wait() for proc in procs)), 10)
        await self.emulator.__aexit__(exc_type, exc, tb)
        if self._scratch_root is not None:
            shutil.rmtree(self._scratch_root, ignore_errors=True)

    # -- what tests look at ------------------------------------------------------------------------------------

    def kubeconfig(self, path: Path, namespace: str = "default", context: str = "fake") -> Path:
        """Write a kubeconfig for this cluster (plain http, a dummy token) with ``context`` current."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {"token": "fake-token"}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the live (not deleted) objects of a resource, e.g. ``"networkpolicies"``."""
        return [copy.deepcopy(obj.raw) for (resource, ns, _), obj in self.emulator.objects.items()
                if resource.plural == plural and not obj.deleted and (namespace is None or ns == namespace)]

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the live pod objects."""
        return self.objects("pods", namespace)

    def api_calls(self) -> collections.Counter[str]:
        """Requests received, keyed ``VERB resource[/subresource]`` (WATCH and EXEC as verbs of their own)."""
        return collections.Counter(self._calls)

    async def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the pod's status as a kubelet does (watchers see MODIFIED; not an API call).
        A terminal phase (an eviction, a deadline) also ends what the pod runs, as a kubelet ends its containers,
        so an exec into it stops there rather than running on."""
        await self.emulator.patch_object(PODS, namespace, name, {"status": status})
        pod = self._pods.get((namespace, name))
        if pod is not None and status.get("phase") in ("Failed", "Succeeded"):
            self._kill(pod)

    # -- the API server ----------------------------------------------------------------------------------------

    @web.middleware
    async def _count(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        self._calls[_call_key(request.method, request.path, request.query)] += 1
        return await handler(request)

    async def _delegate(self, request: web.Request) -> web.StreamResponse:
        return await self.emulator(request)

    # -- the kubelet -------------------------------------------------------------------------------------------

    async def _watch_pods(self, events: AsyncIterator[dict[str, Any]]) -> None:
        """Turn pod events into kubelet work: a new pod is started after ``start_delay``, a deleted one killed."""
        async for event in events:
            obj, kind = event["object"], event["type"]
            meta = obj.get("metadata", {})
            key, uid = (meta.get("namespace") or "default", meta.get("name", "")), meta.get("uid", "")
            known = self._pods.get(key)
            if kind == "DELETED" and known is not None and known.uid == uid:
                self._forget(key)
            elif kind == "ADDED" and (known is None or known.uid != uid):
                if known is not None:
                    self._forget(key)
                self._pods[key] = _Pod(*key, uid=uid, spec=copy.deepcopy(obj.get("spec") or {}))
                self._later(self.start_delay, "start", self._pods[key])

    def _later(self, delay: float, action: str, pod: _Pod) -> None:
        """Queue ``action`` for the kubelet in ``delay`` seconds."""
        def fire() -> None:
            self._timers.discard(handle)
            self._work.put_nowait((action, pod.key, pod.uid))
        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    async def _kubelet(self) -> None:
        """Do the timed work one item at a time: start, image-pull back-off, deadline."""
        while True:
            action, key, uid = await self._work.get()
            pod = self._pods.get(key)
            if pod is None or pod.uid != uid:
                continue  # deleted (or replaced) meanwhile
            try:
                if action == "start":
                    await self._start(pod)
                elif action == "backoff":
                    await self._patch_containers(pod, "Pending", waiting=("ImagePullBackOff", "Back-off pulling"))
                elif action == "deadline":
                    self._kill(pod)
                    await self.emulator.patch_object(PODS, *key, {"status": {
                        "phase": "Failed", "reason": "DeadlineExceeded", "message": DEADLINE_MESSAGE,
                        **self._container_status(pod, terminated=True)}})
            except LookupError:
                pass  # deleted while we were at it
            except Exception:  # the kubelet outlives any one pod's trouble, as a real one does
                logger.exception("fake kubelet: %s of pod %s/%s failed", action, *key)

    async def _start(self, pod: _Pod) -> None:
        """Run the pod (or fail to pull its image) and start the clock of its ``activeDeadlineSeconds``."""
        pod.started = _now()
        deadline = pod.spec.get("activeDeadlineSeconds")
        if any(c.get("image") in self.missing_images for c in pod.containers()):
            await self._patch_containers(pod, "Pending", waiting=("ErrImagePull", "failed to pull and unpack"))
            self._later(IMAGE_BACKOFF_S, "backoff", pod)
            if deadline is not None:
                self._later(float(deadline), "deadline", pod)
            return
        if self.isolation == "namespaces":
            try:
                await self._spawn_keepalive(pod)
            except (OSError, RuntimeError) as e:
                await self.emulator.patch_object(PODS, *pod.key, {"status": {
                    "phase": "Failed", "reason": "StartError", "message": str(e), "startTime": pod.started,
                    **self._container_status(pod, terminated=True)}})
                return
            if self._pods.get(pod.key) is not pod:  # deleted while it started
                self._kill(pod)
                return
        else:
            assert self._scratch_root is not None
            pod.scratch = Path(tempfile.mkdtemp(prefix=f"{pod.namespace}.{pod.name}.", dir=self._scratch_root))
        pod.running = True
        self._ips += 1
        await self.emulator.patch_object(PODS, *pod.key, {"spec": {"nodeName": "fake-node"}, "status": {
            "phase": "Running", "podIP": f"10.244.{self._ips // 250}.{self._ips % 250 + 2}", "hostIP": "10.0.0.2",
            "startTime": pod.started, **self._container_status(pod)}})
        if deadline is not None:
            self._later(float(deadline), "deadline", pod)

    def _container_status(self, pod: _Pod, *, terminated: bool = False,
                          waiting: tuple[str, str] | None = None) -> dict[str, Any]:
        """``conditions`` and ``containerStatuses`` of a pod whose containers run, ended, or wait for images."""
        now, ready = _now(), not terminated and waiting is None
        statuses = []
        for container in pod.containers():
            image = container.get("image", "")
            if terminated:
                state: dict[str, Any] = {"terminated": {"exitCode": 137, "reason": "Error",
                                                        "startedAt": pod.started, "finishedAt": now}}
            elif waiting is not None and image in self.missing_images:
                state = {"waiting": {"reason": waiting[0], "message": f'{waiting[1]} image "{image}": not found'}}
            elif waiting is not None:
                state = {"waiting": {"reason": "PodInitializing"}}
            else:
                state = {"running": {"startedAt": pod.started}}
            statuses.append({"name": container.get("name", ""), "ready": ready, "started": ready, "restartCount": 0,
                             "image": image, "imageID": "", "containerID": f"fake://{pod.uid}", "state": state})
        flag = "True" if ready else "False"
        conditions = [{"type": kind, "status": status, "lastTransitionTime": now} for kind, status in
                      [("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", flag), ("Ready", flag)]]
        return {"conditions": conditions, "containerStatuses": statuses}

    async def _patch_containers(self, pod: _Pod, phase: str, *, waiting: tuple[str, str]) -> None:
        await self.emulator.patch_object(PODS, *pod.key, {"status": {
            "phase": phase, "startTime": pod.started, **self._container_status(pod, waiting=waiting)}})

    async def _spawn_keepalive(self, pod: _Pod) -> None:
        """Start the pod's namespaces: ``unshare`` forks PID 1, which mounts a tmpfs per pod path and sleeps."""
        mounts = " ".join(f"mount -t tmpfs -o mode=1777 tmpfs {path};" for path in POD_PATHS)
        script = f"set -e; {mounts} echo ready; exec sleep infinity </dev/null >/dev/null 2>&1"
        # pdeathsig twice: unshare dies with this process, PID 1 (and so the whole pod) dies with unshare.
        proc = await asyncio.create_subprocess_exec(
            "setpriv", "--pdeathsig", "KILL", "--", "unshare", "--mount", "--pid", "--fork", "--mount-proc",
            "--propagation", "private", "setpriv", "--pdeathsig", "KILL", "--", "sh", "-c", script,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        pod.keepalive = proc
        assert proc.stdout is not None
        output = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                while not output.endswith(b"ready\n") and (line := await proc.stdout.readline()):
                    output += line
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        if not output.endswith(b"ready\n") or not children.exists() or not children.read_text().split():
            _kill_group(proc.pid)
            raise RuntimeError(f"pod {pod.namespace}/{pod.name} did not start: {output.decode(errors='replace')}")
        pod.init_pid = int(children.read_text().split()[0])
        self.processes[pod.key] = pod.init_pid

    def _kill(self, pod: _Pod) -> None:
        """Kill everything the pod runs (its namespaces die with their PID 1)."""
        for proc in [pod.keepalive, *pod.execs]:
            if proc is not None and proc.returncode is None:
                _kill_group(proc.pid)
        for pgid in pod.groups:
            _kill_group(pgid)
        pod.groups.clear()
        pod.running = False
        self.processes.pop(pod.key, None)

    def _forget(self, key: tuple[str, str]) -> None:
        pod = self._pods.pop(key)
        self._kill(pod)
        if pod.scratch is not None:
            shutil.rmtree(pod.scratch, ignore_errors=True)

    # -- exec --------------------------------------------------------------------------------------------------

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        """``GET .../pods/{name}/exec``: run ``command`` in the pod, streamed over a v4.channel.k8s.io websocket."""
        if self.faults.reject_upgrades_429 > 0:
            self.faults.reject_upgrades_429 -= 1
            return _status(429, "TooManyRequests", "the server has received too many requests and has asked us "
                                                   "to try again later", headers={"Retry-After": "0"})
        if self.faults.reject_upgrades_500 > 0:
            self.faults.reject_upgrades_500 -= 1
            return _status(500, "InternalError", "an error on the server has prevented the request from succeeding")
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if CHANNEL_PROTOCOL not in offered:
            return _status(400, "BadRequest", f"unable to upgrade connection: none of the requested protocols "
                                              f"{offered} is supported (this server speaks {CHANNEL_PROTOCOL})")
        command = request.query.getall("command", [])
        flags = {f: request.query.get(f, "").lower() in ("true", "1") for f in ("stdin", "stdout", "stderr", "tty")}
        if not command:
            return _status(400, "BadRequest", "you must specify at least one command for the container")
        if not (flags["stdin"] or flags["stdout"] or flags["stderr"]):
            return _status(400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr")
        found = self.emulator.live(PODS, namespace, name)
        if not found:
            return _status(404, "NotFound", f'pods "{name}" not found')
        containers = [c.get("name") for c in (found[0].get("spec") or {}).get("containers") or []]
        container = request.query.get("container") or (containers[0] if len(containers) == 1 else None)
        if container is None:
            return _status(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                              f"choose one of: {containers}")
        if container not in containers:
            return _status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        phase = (found[0].get("status") or {}).get("phase")
        pod = self._pods.get((namespace, name))
        if phase != "Running" or pod is None or not pod.running:
            return _status(400, "BadRequest", f"unable to upgrade connection: container not found ({container!r}); "
                                              f"pod phase is {phase}")
        ws = web.WebSocketResponse(protocols=(CHANNEL_PROTOCOL,), max_msg_size=0, timeout=5.0)
        await ws.prepare(request)
        spec = next(c for c in pod.containers() if c.get("name") == container)
        await self._run_exec(ws, request, pod, spec, command, **flags)
        return ws

    async def _run_exec(self, ws: web.WebSocketResponse, request: web.Request, pod: _Pod, container: dict[str, Any],
                        command: list[str], *, stdin: bool, stdout: bool, stderr: bool, tty: bool) -> None:
        """Run ``command`` as the container would and stream it; kill it if the client leaves first.

        Without a pty, ``tty`` only merges stderr into stdout.
        """
        pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        err_to = asyncio.subprocess.STDOUT if tty else pipe if stderr else null
        env = dict(os.environ)
        env.update({e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "name" in e})
        argv = command
        if pod.init_pid is not None:
            workdir = container.get("workingDir") or "/"
            argv = ["nsenter", "-t", str(pod.init_pid), "--mount", "--pid", f"--wdns={workdir}", "--", *command]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=pipe if stdin else null, stdout=pipe if stdout or tty else null, stderr=err_to,
                cwd=pod.scratch, env=env, start_new_session=True)
        except OSError as e:  # as nsenter reports a command it cannot run
            code = 127 if isinstance(e, FileNotFoundError) else 126
            with contextlib.suppress(ConnectionError):
                await ws.send_bytes(b"\x02" + f"failed to execute {command[0]}: {e.strerror}\n".encode())
                await ws.send_bytes(b"\x03" + json.dumps(_exit_status(command, code)).encode())
                await ws.close()
            return
        pod.execs.add(proc)
        if not pod.running:  # the pod ended while the command started: it dies with the pod's other processes
            _kill_group(proc.pid)
        sent, drop = 0, self.faults.drop_after_bytes

        async def send(channel: int, data: bytes) -> None:
            nonlocal sent
            if channel == 1 and drop is not None:
                if sent + len(data) >= drop:
                    await ws.send_bytes(b"\x01" + data[:drop - sent])
                    raise _Dropped
                sent += len(data)
            await ws.send_bytes(bytes([channel]) + data)

        async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
            while stream is not None and (chunk := await stream.read(1 << 16)):
                await send(channel, chunk)

        async def feed() -> None:  # stdin frames (the official client sends str as text); ends when the client leaves
            async for msg in ws:
                if msg.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    continue
                data = msg.data.encode() if msg.type == aiohttp.WSMsgType.TEXT else msg.data
                if data[:1] == b"\x00" and proc.stdin is not None:
                    with contextlib.suppress(ConnectionError):
                        proc.stdin.write(data[1:])
                        await proc.stdin.drain()

        async def run() -> int:
            pumps = [asyncio.create_task(pump(proc.stdout, 1)), asyncio.create_task(pump(proc.stderr, 2))]
            try:
                await asyncio.gather(*pumps)
            finally:
                for task in pumps:
                    task.cancel()
            return await proc.wait()

        feeder, runner = asyncio.create_task(feed()), asyncio.create_task(run())
        try:
            await asyncio.wait({feeder, runner}, return_when=asyncio.FIRST_COMPLETED)
            if not runner.done():
                return  # the client left: the finally kills the command
            feeder.cancel()
            try:
                code = runner.result()
            except _Dropped:
                if request.transport is not None:
                    request.transport.close()  # flushes what was sent, then closes with no close frame
                return
            except ConnectionError:
                return
            code = code if code >= 0 else 128 - code
            with contextlib.suppress(ConnectionError):
                if not self.faults.omit_status:
                    await ws.send_bytes(b"\x03" + json.dumps(_exit_status(command, code)).encode())
                await ws.close()
        finally:  # no await before the bookkeeping: aiohttp cancels this handler once the client has gone
            for task in (feeder, runner):
                task.cancel()
            if proc.returncode is None:  # the client left, or the connection failed
                _kill_group(proc.pid)
            elif pod.init_pid is None and _group_alive(proc.pid):
                pod.groups.add(proc.pid)  # its background processes die with the pod, as in a container
            pod.execs.discard(proc)
            await asyncio.gather(feeder, runner, return_exceptions=True)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeCluster(isolation=args.isolation, start_delay=args.start_delay, missing_images=args.missing_image,
                           host=args.host, port=args.port) as cluster:
        cluster.kubeconfig(Path(args.kubeconfig))
        print(f"ready {cluster.url}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Kubernetes cluster until SIGTERM or SIGINT.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig for it")
    parser.add_argument("--isolation", choices=["namespaces", "none"], default="namespaces")
    parser.add_argument("--start-delay", type=float, default=0.0, help="seconds before a new pod runs")
    parser.add_argument("--missing-image", action="append", default=[], help="an image that fails to pull")
    uvloop.run(_serve(parser.parse_args(argv)))  # libuv reaps children without a thread per process


if __name__ == "__main__":
    main()
