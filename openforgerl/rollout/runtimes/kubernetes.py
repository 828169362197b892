"""The ``kubernetes`` runtime: one bare Pod per rollout on a Kubernetes cluster (official client).

Invariant: a run's NetworkPolicy exists before its first pod; every pod carries the run, rollout,
task, attempt, owner and runtime-instance labels and ends on its own at ``activeDeadlineSeconds``; the
API server is asked for a pod's state never per pod: one LIST+WATCH informer per runtime feeds every
waiter and health check. Commands run by exec over the ``v4.channel.k8s.io`` websocket protocol with a
bound on concurrent handshakes and jittered retries on 429/5xx; a command with a timeout runs
detached in its own process group, its exit code written by a shell outside that group, so a timeout
kills exactly what it started and a dropped stream loses nothing. Pod failures map onto the same
statuses as Docker: whatever is not the policy's doing (image pulls, scheduling, eviction, node loss,
preemption, the keepalive's death from outside) is a ``SandboxError`` or an unhealthy sandbox (``infra_error``);
the pod's deadline passing while the agent runs is an agent timeout; a keepalive ended by a signal that no
eviction, deletion or OOM kill explains was ended from inside, the policy's doing. ``release`` and ``sweep`` delete
what a finished run, or one whose owner died, left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import orjson
from pydantic import Field

from openforgerl.containers.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, CopyReport, extract, put_archive
from openforgerl.errors import ForgeError, SandboxError, UserError
from openforgerl.log import get_logger
from openforgerl.processes import is_alive
from openforgerl.rollout.runtime import (
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_RUN,
    ExecResult,
    NetworkMode,
    Reach,
    Runtime,
    RuntimeConfig,
    Sandbox,
    SandboxHealth,
    SandboxSpec,
)
from openforgerl.rollout.runtimes import kube_manifests as manifests
from openforgerl.rollout.runtimes.kube_manifests import LABEL_INSTANCE, KubeSettings, Profile
from openforgerl.stack.part import Part, PartStatus
from openforgerl.tasks import Task

log = get_logger(__name__)
OUTPUT_LIMIT = 4 * 1024 * 1024
EXEC_PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
EXEC_DIR = "/tmp/.forge-exec"
WAIT_SLICE_SEC = 240
"""How long one wait exec holds its stream before it is re-asked (a stream is never held for hours)."""
MISSING = 44
RC_MARK = b"forge-exec-rc="
# make_dirs(fresh=True) in a pod: empty each directory (it may be a volume's mount point), never remove it
EMPTY_DIRS = r"""{ for d in "$@"; do if [ -d "$d" ] && [ ! -L "$d" ]; then rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?*; \
else rm -rf -- "$d"; fi; done; }"""
LOST = {"NodeLost", "Terminating", "PreemptionByScheduler", "DeletionByTaintManager", "TerminationByKubelet"}
"""Reasons a pod the API still calls Running is gone in fact (its node stopped answering, it is being evicted)."""
# A pod in one of these waiting reasons will not start by itself: an infra error at once.
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff", "RunContainerError"}


class KubernetesRuntimeConfig(RuntimeConfig, KubeSettings):
    """Settings of the kubernetes runtime (the manifest settings of ``KubeSettings`` plus the client's)."""

    type: Literal["kubernetes"] = "kubernetes"
    context: str | None = None
    """The kubeconfig context; unset: the current one (or the in-cluster service account)."""
    kubeconfig: str | None = None
    """A kubeconfig file; unset: $KUBECONFIG, then ~/.kube/config, then in-cluster."""
    registry: str | None = None
    """A registry the cluster pulls from, where harness layers (task image + harness tools, built with
    this host's Docker) are pushed; needed for harnesses that install tools."""
    startup_timeout_sec: float = Field(600.0, gt=0)
    """A pod not running by then (unschedulable, pulling) is an infra error."""
    exec_handshakes: int = Field(32, ge=1)
    """Exec websocket handshakes in flight at once (the API server's exec path is its most expensive)."""
    api_threads: int = Field(16, ge=1)
    """Threads for API calls (the official client is synchronous)."""
    retries: int = Field(6, ge=0)
    """Tries of an API call or exec handshake answered 429/5xx or dropped, with jittered backoff."""
    attach_limit_sec: float = Field(60.0, gt=0)
    """Commands with at most this timeout run attached (one exec); longer ones run detached and are
    waited for in slices (two execs, whatever the duration up to WAIT_SLICE_SEC)."""
    watch: Literal["informer", "poll"] = "informer"
    """informer: one LIST+WATCH for all pods; poll: a GET per pod per ``poll_interval_sec`` (the
    benchmark's baseline, never better)."""
    poll_interval_sec: float = Field(1.0, gt=0)


@dataclass
class PodState:
    """What the informer last saw of one pod, and an event set on every change."""

    obj: dict[str, Any] | None = None
    gone: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class KubernetesRuntime(Runtime):
    name = "kubernetes"
    Config = KubernetesRuntimeConfig
    config: KubernetesRuntimeConfig

    def __init__(self, config: KubernetesRuntimeConfig | None = None) -> None:
        super().__init__(config)
        self.instance = uuid.uuid4().hex[:12]
        self._client: Any = None
        self._pool = ThreadPoolExecutor(max_workers=self.config.api_threads, thread_name_prefix="forge-kube")
        self._pods: dict[str, PodState] = {}
        self._informer: Informer | None = None
        self._policies: dict[tuple[str, NetworkMode], asyncio.Future[None]] = {}
        self._images: dict[tuple[str, str], asyncio.Future[str]] = {}
        self._exec: Execer | None = None
        self.api_calls = 0
        """API requests made (create, get, delete, list, watch; exec handshakes are counted by the Execer)."""

    # -- the client ---------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = load_client(self.config)
        return self._client

    @property
    def core(self) -> Any:
        from kubernetes import client as k8s
        return k8s.CoreV1Api(self.client)

    @property
    def networking(self) -> Any:
        from kubernetes import client as k8s
        return k8s.NetworkingV1Api(self.client)

    async def call(self, fn: Callable[..., Any], *args: Any, what: str, missing_ok: bool = False,
                   **kwargs: Any) -> Any:
        """``fn`` (a blocking API call) on the runtime's threads, retried with jitter on 429/5xx and
        connection errors; returns the parsed JSON body (None for a 404 when ``missing_ok``)."""
        from kubernetes.client.exceptions import ApiException
        loop = asyncio.get_running_loop()
        for attempt in range(self.config.retries + 1):
            self.api_calls += 1
            try:
                response = await loop.run_in_executor(
                    self._pool, functools.partial(fn, *args, _preload_content=False, **kwargs))
                return orjson.loads(response.data) if response.data else {}
            except ApiException as exc:
                if exc.status == 404 and missing_ok:
                    return None
                if exc.status not in (429, 500, 502, 503, 504) or attempt == self.config.retries:
                    raise SandboxError(f"kubernetes {what}: HTTP {exc.status} {_reason(exc)}",
                                       fix=_api_fix(exc.status, self.config)) from exc
                await asyncio.sleep(_backoff(attempt, _retry_after(exc.headers)))
            except (OSError, ValueError) as exc:  # urllib3's connection errors are OSErrors
                if attempt == self.config.retries:
                    raise SandboxError(f"kubernetes {what}: {type(exc).__name__}: {exc}",
                                       fix=f"check the cluster of context {self.config.context or '(current)'} "
                                           "answers (kubectl get pods)") from exc
                await asyncio.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    # -- Runtime -------------------------------------------------------------------------------------
    async def check(self, tasks: Sequence[Task]) -> None:
        """The API answers in the namespace, and every task names an image the cluster can pull."""
        try:
            await self.call(self.core.list_namespaced_pod, self.config.namespace, limit=1, what="list pods")
        except ForgeError as exc:
            raise UserError(f"the kubernetes runtime cannot list pods in namespace {self.config.namespace}: "
                            f"{exc.what}", fix=exc.fix or "check --kube-context and --namespace") from None
        for task in tasks:
            if not task.config.environment.docker_image:
                raise UserError(f"{task.path}: no [environment] docker_image, and a cluster cannot build images",
                                fix="publish it with forge build-env --push REGISTRY (a registry the cluster "
                                    "pulls from) and roll out the manifest it writes")

    async def reach(self, modes: set[NetworkMode]) -> dict[NetworkMode, Reach]:
        """Pods reach the proxy at its Service (or ``proxy_host``); there is no host network to share."""
        if "host" in modes:
            raise UserError("network=host has no meaning on the kubernetes runtime (pods never share the "
                            "orchestrator's network)", fix="use network isolated (the default)")
        return {mode: Reach(None if mode == "none" else self.config.proxy_address) for mode in modes}

    async def image_for(self, task: Task, tool: str | None) -> str:
        """The task's published image; with a harness that installs tools, its harness layer, built by this
        host's Docker and pushed to ``registry`` once per (image, tool)."""
        image = task.config.environment.docker_image or ""
        if tool is None:
            return image
        if not self.config.registry:
            raise SandboxError(f"harness tools of {tool!r} cannot reach the pods: no runtime.registry",
                               fix="set runtime.registry to a registry the cluster pulls from (harness layers are "
                                   "pushed there), or use a harness that installs nothing (react, nop)")
        key = (image, tool)
        if key not in self._images:
            self._images[key] = asyncio.ensure_future(asyncio.to_thread(push_harness_layer, image, tool,
                                                                        self.config.registry))
        try:
            return await asyncio.shield(self._images[key])
        except ForgeError:
            del self._images[key]  # the next rollout tries again
            raise

    async def start(self, spec: SandboxSpec) -> KubernetesSandbox:
        if spec.network == "host":
            raise SandboxError("network=host is not offered by the kubernetes runtime")
        run = spec.labels.get(LABEL_RUN, "run")
        await self._policy(run, spec.network)
        name = manifests.pod_name(spec, uuid.uuid4().hex[:8])
        labels = manifests.pod_labels(spec, self.instance, os.getpid(), socket.gethostname())
        body = manifests.pod_manifest(spec, self.config, name=name, labels=labels)
        state = self._pods.setdefault(name, PodState())
        self._ensure_informer()
        await self.call(self.core.create_namespaced_pod, self.config.namespace, body, what=f"create pod {name}")
        box = KubernetesSandbox(self, name, spec, manifests.profile_for(self.config, spec.agent_user))
        if self.config.watch == "poll":  # what watching a pod costs without an informer: a GET per interval
            box.poller = asyncio.ensure_future(self._poll(name))
        try:
            await self._until_running(name, state, spec.image)
        except BaseException:
            await box.stop()
            raise
        return box

    async def _policy(self, run: str, network: NetworkMode) -> None:
        """The run's NetworkPolicy for ``network``, created once, before the first of its pods."""
        key = (run, network)
        if key not in self._policies:
            body = manifests.network_policy(run, network, self.config)
            body["metadata"]["labels"].update({LABEL_OWNER_PID: str(os.getpid()),
                                               LABEL_OWNER_HOST: manifests.label_value(socket.gethostname())})
            self._policies[key] = asyncio.ensure_future(self._create_policy(body))
        try:
            await asyncio.shield(self._policies[key])
        except ForgeError:
            del self._policies[key]
            raise

    async def _create_policy(self, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException
        try:
            await self.call(self.networking.create_namespaced_network_policy, self.config.namespace, body,
                            what=f"create networkpolicy {body['metadata']['name']}")
        except SandboxError as exc:
            if not isinstance(exc.__cause__, ApiException) or exc.__cause__.status != 409:
                raise  # 409: it exists (a resumed run): the same policy

    def _ensure_informer(self) -> None:
        if self.config.watch == "informer" and self._informer is None:
            self._informer = Informer(self, asyncio.get_running_loop())
            self._informer.start()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """The informer's events, on the event loop: only pods of this runtime instance are tracked."""
        name = obj.get("metadata", {}).get("name", "")
        state = self._pods.get(name)
        if state is None or (obj.get("metadata", {}).get("labels") or {}).get(LABEL_INSTANCE) != self.instance:
            return
        if kind == "DELETED":
            state.gone = True
        else:
            state.obj = obj
        state.changed.set()

    def on_resync(self, names: set[str]) -> None:
        """A fresh LIST: pods of ours it no longer holds were deleted while the watch was down."""
        for name, state in self._pods.items():
            if name not in names and state.obj is not None and not state.gone:
                state.gone = True
                state.changed.set()

    async def refresh(self, name: str) -> PodState:
        """The pod's state as last seen: the informer's, or (poll mode) its poller's latest GET."""
        state = self._pods.get(name) or PodState(gone=True)
        if self.config.watch == "poll":
            obj = await self.call(self.core.read_namespaced_pod, name, self.config.namespace,
                                  what=f"get pod {name}", missing_ok=True)
            state.gone, state.obj = obj is None, obj if obj is not None else state.obj
            state.changed.set()
        return state

    async def _poll(self, name: str) -> None:
        while name in self._pods:
            await asyncio.sleep(self.config.poll_interval_sec)
            with contextlib.suppress(ForgeError):
                await self.refresh(name)

    async def _until_running(self, name: str, state: PodState, image: str) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_sec
        while True:
            state = self._pods.get(name) or PodState(gone=True)
            verdict = startup_verdict(state, image)
            if verdict == "running":
                return
            if verdict:
                raise SandboxError(f"pod {name}: {verdict}", fix=_startup_fix(verdict))
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError(f"pod {name} not running after {self.config.startup_timeout_sec:.0f} s: "
                                   f"{pending_reason(state.obj)}",
                                   fix="check the cluster has room (kubectl describe pod) or raise "
                                       "runtime.startup_timeout_sec")
            state.changed.clear()
            try:
                await asyncio.wait_for(state.changed.wait(), min(left, 5.0))
            except TimeoutError:
                pass

    async def delete_pod(self, name: str) -> None:
        await self.call(self.core.delete_namespaced_pod, name, self.config.namespace, grace_period_seconds=0,
                        what=f"delete pod {name}", missing_ok=True)
        self._pods.pop(name, None)

    @property
    def execer(self) -> Execer:
        if self._exec is None:
            self._exec = Execer(self.client.configuration, self.config)
        return self._exec

    async def release(self) -> None:
        """Delete the pods this instance still has and its runs' policies; stop the informer."""
        for name in list(self._pods):
            await self.delete_pod(name)
        for (run, network), made in list(self._policies.items()):
            if made.done() and not made.exception():
                await self.call(self.networking.delete_namespaced_network_policy,
                                manifests.policy_name(run, network), self.config.namespace,
                                what="delete networkpolicy", missing_ok=True)
        self._policies.clear()
        if self._informer is not None:
            self._informer.stop()
            self._informer = None
        if self._exec is not None:
            await self._exec.close()
            self._exec = None

    async def sweep(self) -> int:
        """Delete forge pods whose owner on this host is dead or which ended (their deadline passed with
        the owner gone elsewhere), and policies of runs whose owner on this host is dead."""
        host = manifests.label_value(socket.gethostname())
        pods = await self.call(self.core.list_namespaced_pod, self.config.namespace, label_selector=LABEL_RUN,
                               what="list pods")
        removed = 0
        for pod in (pods or {}).get("items", []):
            meta, phase = pod.get("metadata", {}), pod.get("status", {}).get("phase")
            labels = meta.get("labels") or {}
            if LABEL_RUN not in labels or labels.get(LABEL_INSTANCE) == self.instance:
                continue
            if _owner_dead(labels, host) or phase in ("Succeeded", "Failed"):
                await self.delete_pod(meta["name"])
                removed += 1
        policies = await self.call(self.networking.list_namespaced_network_policy, self.config.namespace,
                                   label_selector=LABEL_RUN, what="list networkpolicies")
        for policy in (policies or {}).get("items", []):
            labels = policy.get("metadata", {}).get("labels") or {}
            if LABEL_RUN in labels and _owner_dead(labels, host):
                await self.call(self.networking.delete_namespaced_network_policy, policy["metadata"]["name"],
                                self.config.namespace, what="delete networkpolicy", missing_ok=True)
        return removed


class Informer:
    """One LIST+WATCH of this runtime instance's pods, on a thread, feeding ``on_event`` on the loop.
    A watch that ends or breaks is resumed; one that is too old (410) starts over with a LIST."""

    def __init__(self, runtime: KubernetesRuntime, loop: asyncio.AbstractEventLoop) -> None:
        self.runtime, self.loop = runtime, loop
        self.selector = f"{LABEL_INSTANCE}={runtime.instance}"
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="forge-kube-informer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read that is waiting for the next event
            except Exception:  # noqa: BLE001 (already closed)
                pass

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException
        core, namespace, failures = self.runtime.core, self.runtime.config.namespace, 0
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    self.runtime.api_calls += 1
                    listed = orjson.loads(core.list_namespaced_pod(namespace, label_selector=self.selector,
                                                                   _preload_content=False).data)
                    items = listed.get("items", [])
                    self.loop.call_soon_threadsafe(self._resync, items)
                    version = listed.get("metadata", {}).get("resourceVersion") or ""
                version = self._watch(core, namespace, version)
                failures = 0
            except ApiException as exc:
                version = None if exc.status == 410 else version
                failures += 1
            except Exception as exc:  # noqa: BLE001 (a broken connection: resume after a pause)
                if self._stop.is_set():
                    return
                log.debug("informer: %s: %s", type(exc).__name__, exc)
                failures += 1
                version = None if failures > 3 else version
            if failures:
                self._stop.wait(_backoff(min(failures, 6)))

    def _resync(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self.runtime.on_event("ADDED", item)
        self.runtime.on_resync({item.get("metadata", {}).get("name", "") for item in items})

    def _watch(self, core: Any, namespace: str, version: str) -> str | None:
        """Stream events until the watch ends; returns the version to resume from (None: LIST again)."""
        self.runtime.api_calls += 1
        kwargs: dict[str, Any] = {"resource_version": version} if version and version != "..." else {}
        self._response = core.list_namespaced_pod(namespace, label_selector=self.selector, watch=True,
                                                  allow_watch_bookmarks=True, timeout_seconds=300,
                                                  _preload_content=False, **kwargs)
        buffer = b""
        try:
            for chunk in self._response.stream(amt=None, decode_content=False):
                if self._stop.is_set():
                    return version
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        return None if obj.get("code") == 410 else version
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.loop.call_soon_threadsafe(self.runtime.on_event, kind, obj)
        finally:
            self._response.release_conn()
            self._response = None
        return version


class ExecError(SandboxError):
    """An exec stream that broke (dropped, no status): worth retrying when the command is idempotent."""


class Execer:
    """Exec over the ``v4.channel.k8s.io`` websocket protocol with aiohttp (one event loop, no thread
    per stream). Auth and TLS come from the official client's configuration."""

    def __init__(self, configuration: Any, config: KubernetesRuntimeConfig) -> None:
        self.config = config
        self.base = configuration.host.rstrip("/")
        self.namespace = config.namespace
        self._configuration = configuration
        self._ssl = _ssl_context(configuration)
        self._handshakes = asyncio.Semaphore(config.exec_handshakes)
        self._session: aiohttp.ClientSession | None = None
        self.handshakes = 0

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self) -> dict[str, str]:
        configuration = self._configuration
        if configuration.refresh_api_key_hook is not None:
            configuration.refresh_api_key_hook(configuration)
        headers = {}
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _url(self, pod: str, argv: Sequence[str], stdin: bool) -> str:
        query = "&".join(f"command={quote(arg, safe='')}" for arg in argv)
        flags = f"container={manifests.CONTAINER}&stdout=true&stderr=true&tty=false" + ("&stdin=true" if stdin else "")
        return f"{self.base}/api/v1/namespaces/{self.namespace}/pods/{pod}/exec?{query}&{flags}"

    async def run(self, pod: str, argv: Sequence[str], *, stdin: bytes | None = None,
                  limit: int = OUTPUT_LIMIT, retry_broken: bool = True) -> tuple[int, bytes, bytes]:
        """Run ``argv`` in the pod, attached: (exit code, stdout, stderr), each the last ``limit`` bytes.
        Raises ExecError when the stream broke on every try (only retried when ``retry_broken``)."""
        for attempt in range(self.config.retries + 1):
            try:
                return await self._once(pod, argv, stdin, limit)
            except ExecError:
                if not retry_broken or attempt == self.config.retries:
                    raise
                await asyncio.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    async def _connect(self, pod: str, argv: Sequence[str], stdin: bool) -> aiohttp.ClientWebSocketResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=self._ssl))
        url = self._url(pod, argv, stdin)
        for attempt in range(self.config.retries + 1):
            async with self._handshakes:
                self.handshakes += 1
                try:
                    return await self._session.ws_connect(url, protocols=(EXEC_PROTOCOL,), headers=self._headers(),
                                                          max_msg_size=0, autoping=True)
                except aiohttp.WSServerHandshakeError as exc:
                    retryable, after = exc.status in (429, 500, 502, 503, 504), _retry_after(exc.headers)
                    if not retryable or attempt == self.config.retries:
                        raise SandboxError(f"exec in pod {pod}: HTTP {exc.status} {exc.message}",
                                           fix=_api_fix(exc.status, self.config)) from exc
                except (aiohttp.ClientConnectionError, OSError) as exc:
                    after = None
                    if attempt == self.config.retries:
                        raise ExecError(f"exec in pod {pod}: {type(exc).__name__}: {exc}") from exc
            await asyncio.sleep(_backoff(attempt, after))
        raise AssertionError("unreachable")

    async def _once(self, pod: str, argv: Sequence[str], stdin: bytes | None, limit: int) -> tuple[int, bytes, bytes]:
        ws = await self._connect(pod, argv, stdin is not None)
        out, err, status = Tail(limit), Tail(limit), None
        try:
            if stdin:
                view = memoryview(stdin)
                for start in range(0, len(view), 1 << 20):
                    await ws.send_bytes(b"\x00" + view[start:start + (1 << 20)].tobytes())
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                    continue
                channel, payload = message.data[0], message.data[1:]
                if channel == STDOUT:
                    out.add(payload)
                elif channel == STDERR:
                    err.add(payload)
                elif channel == ERROR:
                    status = payload
        finally:
            await ws.close()
        if status is None:
            raise ExecError(f"exec in pod {pod}: the stream ended without an exit status")
        return exit_code(status, pod), out.value(), err.value()


def exit_code(status: bytes, pod: str) -> int:
    """The exit code a v1 Status on the error channel carries; other failures are a SandboxError."""
    try:
        body = json.loads(status)
    except ValueError as exc:
        raise ExecError(f"exec in pod {pod}: unreadable status {status[:200]!r}") from exc
    if body.get("status") == "Success":
        return 0
    if body.get("reason") == "NonZeroExitCode":
        for cause in body.get("details", {}).get("causes", []):
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message", "1"))
        return 1
    raise SandboxError(f"exec in pod {pod} failed: {body.get('message') or body}")


class KubernetesSandbox(Sandbox):
    """A pod. Commands go through ``Execer``; the pod's state through the runtime's informer."""

    fresh_step = EMPTY_DIRS

    def __init__(self, runtime: KubernetesRuntime, name: str, spec: SandboxSpec, profile: Profile) -> None:
        super().__init__(name)
        self.runtime, self.name, self.spec, self.profile = runtime, name, spec, profile
        self.poller: asyncio.Future[None] | None = None

    # -- commands ------------------------------------------------------------------------------------
    def _argv(self, command: Sequence[str], user: str | None, env: Mapping[str, str] | None,
              cwd: str | None) -> list[str]:
        """A command with its user, environment and directory, which exec itself cannot set."""
        argv = list(command)
        if env:
            argv = ["env", *(f"{key}={value}" for key, value in env.items()), *argv]
        if cwd:
            argv = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "forge-cd", cwd, *argv]
        who = user or self.spec.user
        if self.profile == "root" and who and who.split(":")[0] not in ("root", "0"):
            uid, _, gid = who.partition(":")
            argv = ["setpriv", f"--reuid={uid}", f"--regid={gid or uid}", "--init-groups", "--", *argv]
        return argv

    async def exec(self, command: Sequence[str], *, timeout: float | None = None, user: str | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv, started = self._argv(command, user, env, cwd), time.monotonic()
        if timeout is None or timeout <= self.runtime.config.attach_limit_sec:
            return await self._attached(argv, timeout, started)
        return await self._detached(argv, timeout, started)

    async def _attached(self, argv: list[str], timeout: float | None, started: float) -> ExecResult:
        if timeout is not None:  # coreutils timeout kills the command's whole process group
            argv = ["sh", "-c", TIMEOUT_SCRIPT, "forge-timeout", f"{timeout:.0f}", *argv]
        try:
            code, out, err = await asyncio.wait_for(self.runtime.execer.run(self.name, argv, retry_broken=False),
                                                    None if timeout is None else timeout + 30)
        except TimeoutError:
            return ExecResult(None, "", "", time.monotonic() - started, timed_out=True)
        if timeout is not None and code == 137 and time.monotonic() - started >= timeout:
            return ExecResult(None, _text(out), _text(err), time.monotonic() - started, timed_out=True)
        return ExecResult(code, _text(out), _text(err), time.monotonic() - started)

    async def _detached(self, argv: list[str], timeout: float, started: float) -> ExecResult:
        """Start the command in its own process group with a recorder outside it, then wait for its exit
        code in slices; on timeout kill the group, whose recorder still says how it ended."""
        state = f"{EXEC_DIR}/{uuid.uuid4().hex}"
        await self._housekeeping(["sh", "-c", START_SCRIPT, state, *argv], "start a command")
        deadline = started + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                await self._housekeeping(["sh", "-c", KILL_SCRIPT, state], "kill a timed-out command")
                code, out, err = await self._wait(state, 10)
                return ExecResult(None, _text(out), _text(err), time.monotonic() - started, timed_out=True)
            code, out, err = await self._wait(state, min(left, WAIT_SLICE_SEC))
            if code is not None:
                return ExecResult(code, _text(out), _text(err), time.monotonic() - started)
            health = await self.health()
            if not health.running:  # the pod ended under the command: say so as the orchestrator expects
                return ExecResult(None, "", health.detail, time.monotonic() - started, timed_out=True)

    async def _wait(self, state: str, seconds: float) -> tuple[int | None, bytes, bytes]:
        try:
            _, out, err = await self.runtime.execer.run(self.name, ["sh", "-c", WAIT_SCRIPT, state,
                                                                    str(max(1, int(seconds))), str(OUTPUT_LIMIT)])
        except SandboxError:
            health = await self.health()
            if not health.running:
                return None, b"", b""
            raise
        if not out.startswith(RC_MARK):
            return None, b"", b""
        mark, _, rest = out.partition(b"\n")
        return int(mark[len(RC_MARK):] or b"1"), rest, err

    async def _housekeeping(self, argv: list[str], what: str, stdin: bytes | None = None) -> bytes:
        code, out, err = await self.runtime.execer.run(self.name, argv, stdin=stdin)
        if code != 0:
            raise SandboxError(f"could not {what} in pod {self.name}: exit {code}: "
                               f"{_text(err).strip()[-300:] or _text(out).strip()[-300:]}")
        return out

    async def make_dirs(self, paths: Sequence[str], *, owner: str | None = None, fresh: bool = False) -> None:
        """As the base class, but ``fresh`` empties a directory rather than removing it (it may be a volume's
        mount point), and a non-root pod has no other owner than itself (``owner`` is moot there)."""
        await super().make_dirs(paths, owner=owner if self.profile == "root" else None, fresh=fresh)

    async def end_processes(self, agent_user: str | None) -> None:
        """Kill every process the agent could have started: all of its user's (an unprivileged agent in a
        root pod; root's services live on), else every process but the pod's keepalive (PID 1)."""
        argv = ["sh", "-c", "kill -s KILL -- -1 2>/dev/null; sleep 0.2; kill -s KILL -- -1 2>/dev/null; exit 0"]
        root_agent = agent_user is None or agent_user.split(":")[0] in ("root", "0")
        if self.profile == "root" and not root_agent:
            await self._housekeeping(self._argv(argv, agent_user, None, None), "end the agent's processes")
        else:
            await self._housekeeping(argv, "end the agent's processes")

    async def put(self, src: Path, dest: str) -> None:
        data = put_archive(src)
        await self._housekeeping(["sh", "-c", PUT_SCRIPT, "forge-put", dest, str(len(data))],
                                 f"copy {src.name} to {dest}", stdin=data)

    async def get(self, src: str, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  max_files: int = DEFAULT_MAX_FILES) -> CopyReport:
        # a tar of max_bytes of content is at most a little more: headers of max_files entries
        limit = max_bytes + 1024 * (max_files + 2)
        code, out, err = await self.runtime.execer.run(self.name, ["sh", "-c", GET_SCRIPT, "forge-get", src,
                                                                   str(limit)], limit=limit)
        if code == MISSING:
            raise SandboxError(f"{src} does not exist in pod {self.name}")
        if code != 0 and not out:
            raise SandboxError(f"could not copy {src} out of pod {self.name}: {_text(err).strip()[-300:]}")
        return await asyncio.to_thread(extract, [out], dest, max_bytes=max_bytes, max_files=max_files)

    # -- state ---------------------------------------------------------------------------------------
    async def health(self) -> SandboxHealth:
        """From the informer's cache (no API call); in poll mode from the poller's latest GET."""
        state = self.runtime._pods.get(self.name) or PodState(gone=True)
        return pod_health(state)

    async def _remove(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
        try:
            await self.runtime.delete_pod(self.name)
        except ForgeError as exc:  # the sweep of a later run, or the pod's deadline, ends it
            log.warning("could not delete pod %s: %s", self.name, exc)


# Shell kept POSIX (dash, busybox ash). Positional: $0 the state directory, the rest the command.
START_SCRIPT = r"""
umask 077; mkdir -p /tmp/.forge-exec 2>/dev/null
mkdir "$0" || exit 0
( setsid "$@" > "$0/out" 2> "$0/err" < /dev/null &
  echo $! > "$0/pid"; wait $!; echo $? > "$0/rc.tmp"; mv "$0/rc.tmp" "$0/rc" ) > /dev/null 2>&1 < /dev/null &
"""
WAIT_SCRIPT = r"""
i=0; n=$(( $1 * 10 ))
while [ ! -f "$0/rc" ] && [ $i -lt $n ]; do
  if [ $i -lt 20 ]; then sleep 0.05 2>/dev/null || sleep 1; i=$((i + 1)); else sleep 1; i=$((i + 10)); fi
done
[ -f "$0/rc" ] || exit 0
printf 'forge-exec-rc=%s\n' "$(cat "$0/rc")"; tail -c "$2" "$0/out"; tail -c "$2" "$0/err" >&2
"""
TIMEOUT_SCRIPT = r"""
if command -v timeout >/dev/null; then exec timeout -s KILL "$@"; fi; shift; exec "$@"
"""
KILL_SCRIPT = r"""
[ -f "$0/pid" ] && kill -s KILL -- "-$(cat "$0/pid")" 2>/dev/null; exit 0
"""
PUT_SCRIPT = r"""mkdir -p -- "$1" && head -c "$2" | tar -xf - -C "$1" """
GET_SCRIPT = r"""
[ -e "$1" ] || [ -L "$1" ] || exit 44
cd -- "$(dirname -- "$1")" && tar -cf - -- "$(basename -- "$1")" | head -c "$2"
"""


def startup_verdict(state: PodState, image: str) -> str | None:
    """``running``, None while it may still start, else why it never will (an infra error)."""
    if state.gone:
        return "deleted before it ran"
    pod = state.obj
    if pod is None:
        return None
    status = pod.get("status") or {}
    phase = status.get("phase")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            return f"{waiting['reason']} for {image}: {waiting.get('message', '')}".strip()
        if "running" in (container.get("state") or {}) and phase == "Running":
            return "running"
    if phase in ("Failed", "Succeeded"):
        return f"{phase} before it ran: {status.get('reason', '')} {status.get('message', '')}".strip()
    return None


def pending_reason(pod: dict[str, Any] | None) -> str:
    if not pod:
        return "never seen"
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}".strip()
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}".strip()
    return f"phase {status.get('phase', 'Pending')}"


UNKNOWN_STATE = "ContainerStatusUnknown"
"""The kubelet's reason for a container whose end it did not see (its runtime lost it): not the agent's doing."""


def pod_health(state: PodState) -> SandboxHealth:
    """The taxonomy: a running keepalive is healthy; an ended pod says why, with ``deadline`` set when its own
    activeDeadlineSeconds ended it and ``ended_from_inside`` when a process of its own ended its keepalive."""
    if state.gone:
        return SandboxHealth(False, detail="pod was deleted (node lost, preempted or removed by hand)")
    pod = state.obj or {}
    status = pod.get("status") or {}
    phase, reason, message = status.get("phase"), status.get("reason") or "", status.get("message") or ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = reason or condition.get("reason", "")
            message = message or condition.get("message", "")
    terminated: dict[str, Any] = {}
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or terminated
    ending = (pod.get("metadata") or {}).get("deletionTimestamp")
    if phase == "Running" and not terminated and not ending and reason not in LOST:
        return SandboxHealth(True)
    if reason == "DeadlineExceeded":
        return SandboxHealth(False, detail=f"DeadlineExceeded: {message}".strip(": "), deadline=True)
    if terminated.get("reason") == "OOMKilled":
        return SandboxHealth(False, oom_killed=True, detail="keepalive OOM-killed")
    if reason == "Evicted" and "ephemeral" in message.lower() and "exceeds" in message.lower():
        return SandboxHealth(False, detail=f"Evicted: {message}".strip(), storage_exceeded=True)
    if reason:  # evicted, preempted, its node lost: the pod's own reason says more than its container's
        return SandboxHealth(False, detail=f"pod {phase or 'gone'}: {reason} {message}".strip())
    if terminated:
        code = terminated.get("exitCode")
        detail = f"keepalive terminated: {terminated.get('reason', '')} (exit {code})"
        if isinstance(code, int) and code > 128 and not ending and terminated.get("reason") != UNKNOWN_STATE:
            # a signal with no eviction, deletion, deadline, preemption or OOM kill behind it: the kubelet sets a
            # reason (or deletes the pod) for every kill of its own, so this came from inside, e.g. a root agent's
            # `kill 1` under an init keepalive (`tini`) that forwards it; a plain `sleep` as PID 1 ignores it
            return SandboxHealth(False, detail=f"{detail}: its init was ended from inside", ended_from_inside=True)
        return SandboxHealth(False, detail=detail)
    if phase == "Running":
        return SandboxHealth(False, detail=f"pod {'being deleted' if ending else 'lost'}: {reason} {message}".strip())
    return SandboxHealth(False, detail=f"pod {phase or 'gone'}: {reason} {message}".strip())


def load_client(config: KubernetesRuntimeConfig) -> Any:
    """An ApiClient for the configured kubeconfig/context, else in-cluster; a one-line error otherwise."""
    try:
        from kubernetes import client as k8s
        from kubernetes import config as kube_config
    except ImportError:
        raise UserError("the kubernetes runtime needs the official client",
                        fix='pip install "openforgerl[k8s]"') from None
    path = config.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        if Path(path.split(os.pathsep)[0]).is_file():
            return kube_config.new_client_from_config(config_file=path, context=config.context)
        configuration = k8s.Configuration()
        kube_config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)
    except Exception as exc:  # noqa: BLE001 (the loaders raise ConfigException, ValueError, OSError...)
        raise UserError(f"cannot load the kubernetes config {path} (context {config.context or 'current'}): {exc}",
                        fix="pass --kube-context NAME of `kubectl config get-contexts`, or set runtime.kubeconfig"
                        ) from None


def push_harness_layer(image: str, tool: str, registry: str) -> str:
    """Build the harness layer with this host's Docker and push it to ``registry`` (once per content)."""
    from openforgerl.containers.client import docker_client
    from openforgerl.containers.refs import ensure_local
    from openforgerl.rollout.harness_image import harness_image

    client = docker_client()
    ensure_local(client, image, SandboxError, fix="publish it with forge build-env")
    local = harness_image(client, image, tool)
    target = f"{registry.rstrip('/')}/{local.split('/', 1)[-1]}"
    repository, _, tag = target.rpartition(":")
    client.images.get(local).tag(repository, tag)
    for line in client.images.push(repository, tag=tag, stream=True, decode=True):
        if "error" in line:
            raise SandboxError(f"pushing {target}: {line['error']}", fix=f"check {registry} accepts pushes")
    return target


def _owner_dead(labels: Mapping[str, str], host: str) -> bool:
    if labels.get(LABEL_OWNER_HOST) != host:
        return False
    try:
        return not is_alive(int(labels.get(LABEL_OWNER_PID, "0")))
    except ValueError:
        return False


def _ssl_context(configuration: Any) -> ssl.SSLContext | bool:
    if not configuration.host.startswith("https"):
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _backoff(attempt: int, after: float | None = None) -> float:
    """Full jitter on an exponential base (0.1 s doubling to 5 s), or the server's Retry-After."""
    if after is not None:
        return after + random.uniform(0, 0.1)
    return random.uniform(0, min(5.0, 0.1 * 2 ** attempt))


def _retry_after(headers: Any) -> float | None:
    try:
        return float((headers or {}).get("Retry-After") or "")
    except (TypeError, ValueError):
        return None


def _reason(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)


def _api_fix(status: int | None, config: KubernetesRuntimeConfig) -> str:
    if status in (401, 403):
        return (f"the identity of context {config.context or '(current)'} needs RBAC on pods, pods/exec, pods/log "
                f"and networkpolicies in namespace {config.namespace} (docs/kubernetes.md)")
    if status == 404:
        return f"check namespace {config.namespace} exists (kubectl create namespace {config.namespace})"
    return "check the cluster (kubectl get pods); the call was retried"


def _startup_fix(verdict: str) -> str:
    if "Image" in verdict or "image" in verdict:
        return "push the image where the cluster pulls from (forge build-env --push REGISTRY) or set " \
               "runtime.image_pull_secrets"
    return "kubectl describe pod shows why"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace") if data else ""


class Tail:
    """The last ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size > 2 * self.limit:
            joined = b"".join(self.chunks)[-self.limit:]
            self.chunks, self.size = [joined], len(joined)

    def value(self) -> bytes:
        return b"".join(self.chunks)[-self.limit:]


class KubernetesPart(Part):
    """The kubernetes runtime: its client installed and a kubeconfig context to use. Optional; the check
    reads local files only (it never contacts a cluster)."""

    name = "kubernetes"
    optional = True

    def check(self) -> PartStatus:
        try:
            from kubernetes import config as kube_config
        except ImportError:
            return self.status(False, "the kubernetes client is not installed", fix='pip install "openforgerl[k8s]"')
        try:
            contexts, current = kube_config.list_kube_config_contexts()
        except Exception:  # noqa: BLE001 (no file, or one the loader cannot read)
            return self.status(False, "client installed; no kubeconfig (runs in a cluster use its service account)",
                               fix="kubectl config get-contexts; docs/kubernetes.md")
        return self.status(True, f"client installed; {len(contexts)} context(s), current: {current['name']}")
