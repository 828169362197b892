"""The Kubernetes objects of the ``kubernetes`` runtime, as plain dicts: a rollout's Pod, a run's
NetworkPolicy, and the recording proxy's Deployment and Service.

Invariant: a Pod is bare (no controller restarts it), ends on its own at ``activeDeadlineSeconds``
even when the orchestrator is gone, carries the run/rollout/task/attempt labels, mounts no service
account token and sees no service links, drops every capability, cannot gain privileges, runs under
the runtime's seccomp profile, and requests exactly what it is limited to (ephemeral storage
included). A NetworkPolicy for a run exists before any of its pods: isolated pods may talk to nothing
but the proxy (and DNS when the proxy is reached by name). Pure functions: ``forge k8s manifest``
prints exactly what the runtime creates.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from openforgerl.rollout.runtime import (
    LABEL_ATTEMPT,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_ROLLOUT,
    LABEL_RUN,
    LABEL_TASK,
    NetworkMode,
    SandboxSpec,
    is_ip,
)

CONTAINER = "sandbox"
LABEL_NETWORK = "openforgerl.network"
LABEL_INSTANCE = "openforgerl.instance"
"""The runtime instance (one per orchestrator process) that owns a pod: its informer selects on it."""
PROXY_APP = "forge-proxy"
PROXY_LABELS = {"app.kubernetes.io/name": PROXY_APP}
# What a root-profile container keeps after dropping ALL: enough for chown, su and apt, as in docker.
ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]
# Writable scratch of a non-root pod (its image's / is root's): the framework's own directories.
NONROOT_SCRATCH = ("/logs", "/tests", "/installed-agent", "/tmp")
Profile = Literal["nonroot", "root"]


class KubeSettings(BaseModel):
    """What the manifests depend on (the ``kubernetes`` runtime's settings, minus client-side ones)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = "default"
    profile: Profile = "nonroot"
    """nonroot: the pod runs as ``agent_uid`` (runAsNonRoot) and every command with it; root: a
    root-compatible pod (the handful of capabilities docker keeps), commands switch user with setpriv.
    Tasks whose agent runs as root always get root."""
    agent_uid: int = Field(1000, ge=1)
    runtime_class: str | None = None
    """A RuntimeClass (gVisor: ``gvisor``, Kata: ``kata``) for a second wall around the sandbox."""
    service_account: str | None = None
    """The pods' ServiceAccount (its token is never mounted); unset: the namespace's default."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = Field(default_factory=list)
    cpus: float = Field(1.0, gt=0)
    """CPU of a pod whose task sets none (requests = limits)."""
    memory_mb: int = Field(2048, gt=0)
    """Memory of a pod whose task sets none (requests = limits)."""
    ephemeral_storage_mb: int = Field(10240, gt=0)
    """Ephemeral storage of a pod whose task sets no storage_mb (requests = limits)."""
    proxy_host: str | None = None
    """The proxy's address as pods reach it; unset: its Service, ``forge-proxy.<namespace>.svc``."""
    proxy_port: int = Field(8081, gt=0, lt=65536)
    """The proxy's model-only port (``forge proxy --model-listen``): the one port isolated pods may open."""
    proxy_admin_port: int = Field(8080, gt=0, lt=65536)
    """The proxy's admin API port, for the orchestrator (``proxy.url``); pods never reach it."""
    proxy_labels: dict[str, str] = Field(default_factory=lambda: dict(PROXY_LABELS))
    """Labels of the proxy's pods: isolated pods may open connections to them and nothing else."""
    keepalive: list[str] = Field(default_factory=lambda: ["sleep", "infinity"], min_length=1)
    """The container's command, PID 1 of its namespace. ``sleep`` reaps nothing: processes the agent orphaned
    stay zombies (dead, holding a PID) until the pod goes; images with an init use ``[tini, --, sleep, infinity]``."""
    deadline_margin_sec: float = Field(120.0, ge=0)
    """Added to a rollout's budgets for ``activeDeadlineSeconds``."""

    @property
    def proxy_address(self) -> str:
        return self.proxy_host or f"{PROXY_APP}.{self.namespace}.svc"

    @property
    def proxy_by_name(self) -> bool:
        return not is_ip(self.proxy_address)


def profile_for(settings: KubeSettings, agent_user: str | None) -> Profile:
    """root for agents that run as root (they need a root pod), else the configured profile."""
    return "root" if agent_user is not None and agent_user.split(":")[0] in ("root", "0") else settings.profile


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS-1123 label (lowercase alphanumerics and '-', at most ``limit``)."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return label or "x"


def label_value(text: str) -> str:
    """``text`` as a label value (63 characters of [A-Za-z0-9_.-], alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")


def pod_name(spec: SandboxSpec, suffix: str) -> str:
    rollout = spec.labels.get(LABEL_ROLLOUT, "rollout")
    return f"forge-{dns_label(rollout, 40)}-{suffix}"


def policy_name(run: str, network: NetworkMode) -> str:
    return f"forge-{dns_label(run, 40)}-{network}"


def pod_labels(spec: SandboxSpec, instance: str, owner_pid: int, owner_host: str) -> dict[str, str]:
    labels = {key: label_value(value) for key, value in spec.labels.items()
              if key in (LABEL_RUN, LABEL_ROLLOUT, LABEL_TASK, LABEL_ATTEMPT)}
    labels.update({LABEL_NETWORK: spec.network, LABEL_INSTANCE: instance, LABEL_OWNER_PID: str(owner_pid),
                   LABEL_OWNER_HOST: label_value(owner_host)})
    return labels


def pod_manifest(spec: SandboxSpec, settings: KubeSettings, *, name: str, labels: dict[str, str]) -> dict[str, Any]:
    """The bare Pod of one rollout: a keepalive container the runtime execs into."""
    profile = profile_for(settings, spec.agent_user)
    cpus = spec.cpus or settings.cpus
    memory = spec.memory_mb or settings.memory_mb
    storage = spec.storage_mb or settings.ephemeral_storage_mb
    resources = {"cpu": _cpu(cpus), "memory": f"{memory}Mi", "ephemeral-storage": f"{storage}Mi"}
    container: dict[str, Any] = {
        "name": CONTAINER, "image": spec.image, "imagePullPolicy": settings.image_pull_policy,
        # PID 1 of the pod's namespace (signals from inside, kill -KILL -1, never reach it); as args, like
        # docker's command, so an image's ENTRYPOINT (forge-services) still wraps it.
        "args": list(settings.keepalive),
        "workingDir": spec.workdir,
        "env": [{"name": key, "value": value} for key, value in sorted(spec.env.items())],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": _container_security(profile),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": _pod_security(profile, settings.agent_uid),
        "containers": [container],
    }
    if spec.deadline_sec:
        pod_spec["activeDeadlineSeconds"] = math.ceil(spec.deadline_sec + settings.deadline_margin_sec)
    if profile == "nonroot":  # the image's / belongs to root: the framework's directories are scratch volumes
        volumes = [(f"scratch-{index}", path) for index, path in enumerate(NONROOT_SCRATCH)]
        pod_spec["volumes"] = [{"name": vname, "emptyDir": {}} for vname, _ in volumes]
        container["volumeMounts"] = [{"name": vname, "mountPath": path} for vname, path in volumes]
    if settings.runtime_class:
        pod_spec["runtimeClassName"] = settings.runtime_class
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    if spec.network == "none":
        pod_spec["dnsPolicy"] = "None"
        pod_spec["dnsConfig"] = {"nameservers": ["127.0.0.1"]}  # no resolver: nothing to ask
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
            "spec": pod_spec}


def network_policy(run: str, network: NetworkMode, settings: KubeSettings) -> dict[str, Any]:
    """The policy of a run's pods on ``network``: no ingress at all; egress only to the proxy (and DNS
    when it is reached by name) for isolated, anywhere for bridge, nowhere for none."""
    egress: list[dict[str, Any]] = []
    if network == "isolated":
        proxy_port = [{"protocol": "TCP", "port": settings.proxy_port}]
        peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": dict(settings.proxy_labels)}}]
        if not settings.proxy_by_name:  # a fixed address (a ClusterIP is rewritten to the pods behind it)
            peers.append({"ipBlock": {"cidr": _host_cidr(settings.proxy_address)}})
        egress.append({"to": peers, "ports": proxy_port})
        if settings.proxy_by_name:
            egress.append({"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    elif network == "bridge":
        egress.append({})  # one empty rule: every destination
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": policy_name(run, network), "namespace": settings.namespace,
                         "labels": {LABEL_RUN: label_value(run), LABEL_NETWORK: network}},
            "spec": {"podSelector": {"matchLabels": {LABEL_RUN: label_value(run), LABEL_NETWORK: network}},
                     "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": egress}}


def proxy_manifests(settings: KubeSettings, *, image: str, model: str, engine_url: str,
                    secret: str = "forge-proxy-admin", replicas: int = 1) -> list[dict[str, Any]]:
    """The recording proxy in the cluster: a Deployment running ``forge proxy`` and its Service, the admin API
    on ``proxy_admin_port`` (the orchestrator's) and the model API alone on ``proxy_port`` (the pods'). The
    admin token comes from the Secret ``secret`` (key ``token``); trajectories live on the pod's volume.

    With ``replicas`` > 1, a StatefulSet and a headless Service instead: each replica is a proxy of its own
    with a stable name (``proxy_shards`` lists their URLs for the run config's ``proxy.shards``), since a
    rollout's calls and its admin calls must reach the same replica, which a load-balanced Service cannot
    promise."""
    labels = dict(settings.proxy_labels)
    container = {
        "name": "proxy", "image": image, "imagePullPolicy": settings.image_pull_policy,
        "command": ["forge", "proxy", "--host", "0.0.0.0", "--port", str(settings.proxy_admin_port),
                    "--model-listen", f"0.0.0.0:{settings.proxy_port}", "--model", model,
                    "--engine-url", engine_url, "--data-dir", "/data"],
        "env": [{"name": "FORGE_PROXY_ADMIN_TOKEN",
                 "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}],
        "ports": [{"name": "admin", "containerPort": settings.proxy_admin_port, "protocol": "TCP"},
                  {"name": "model", "containerPort": settings.proxy_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": settings.proxy_admin_port}, "periodSeconds": 5},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "securityContext": _container_security("nonroot"),
    }
    template = {"metadata": {"labels": labels},
                "spec": {"automountServiceAccountToken": False, "enableServiceLinks": False,
                         "securityContext": _pod_security("nonroot", settings.agent_uid),
                         "containers": [container],
                         "volumes": [{"name": "data", "emptyDir": {}}]}}
    metadata = {"name": PROXY_APP, "namespace": settings.namespace, "labels": labels}
    ports = [{"name": "admin", "port": settings.proxy_admin_port, "targetPort": settings.proxy_admin_port,
              "protocol": "TCP"},
             {"name": "model", "port": settings.proxy_port, "targetPort": settings.proxy_port, "protocol": "TCP"}]
    if replicas > 1:  # each replica its own proxy, reached by its own name (forge-proxy-0.forge-proxy.<ns>.svc)
        stateful = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
                    "spec": {"replicas": replicas, "serviceName": PROXY_APP, "podManagementPolicy": "Parallel",
                             "selector": {"matchLabels": labels}, "template": template}}
        headless = {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
                    "spec": {"clusterIP": "None", "selector": labels, "ports": ports}}
        return [stateful, headless]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                  "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
               "spec": {"selector": labels, "ports": ports}}
    return [deployment, service]


def proxy_shards(settings: KubeSettings, replicas: int) -> list[dict[str, str]]:
    """The run config's ``proxy.shards`` for ``proxy_manifests(..., replicas)``: each replica's admin API and
    model API by its stable name (an orchestrator in the cluster resolves them)."""
    return [{"url": f"http://{host}:{settings.proxy_admin_port}", "sandbox_url": f"http://{host}:{settings.proxy_port}"}
            for host in (f"{PROXY_APP}-{i}.{PROXY_APP}.{settings.namespace}.svc" for i in range(replicas))]


def _container_security(profile: Profile) -> dict[str, Any]:
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if profile == "root":
        caps["add"] = list(ROOT_CAPS)
    return {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": caps,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _pod_security(profile: Profile, uid: int) -> dict[str, Any]:
    if profile == "root":
        return {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}}
    return {"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _cpu(cpus: float) -> str:
    return f"{round(cpus * 1000)}m"


def _host_cidr(address: str) -> str:
    ip = ipaddress.ip_address(address)
    return f"{ip}/{32 if ip.version == 4 else 128}"
