"""What the kubernetes runtime creates, as a reviewer reads it: every Pod hardened and bounded, every run's
pods fenced by a NetworkPolicy, all of it valid against the Kubernetes schema (offline, strict)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from openforgerl.cli import _register, cli
from openforgerl.rollout.runtime import LABEL_RUN, LABEL_TASK, SandboxSpec
from openforgerl.rollout.runtimes.kube_manifests import (
    KubeSettings,
    network_policy,
    pod_labels,
    pod_manifest,
    proxy_manifests,
    proxy_shards,
)
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.testing.tasks import write_task

pytest.importorskip("kubernetes_validate", reason="needs the dev extra (kubernetes-validate==1.37.0)")
from openforgerl.testing.k8s_schema import schema_errors  # noqa: E402


def spec(**kw) -> SandboxSpec:
    base = {"image": "registry.example/forge/hello:1", "labels": {LABEL_RUN: "run-1", LABEL_TASK: "hello"},
            "deadline_sec": 1000.0}
    return SandboxSpec(**{**base, **kw})


def pod(settings: KubeSettings | None = None, **kw) -> dict:
    box = spec(**kw)
    return pod_manifest(box, settings or KubeSettings(), name="forge-r-1",
                        labels=pod_labels(box, "inst", 42, "host-a"))


@pytest.mark.parametrize("network", ["isolated", "bridge", "none"])
@pytest.mark.parametrize("agent", [None, "agent", "root"])
def test_every_pod_and_policy_is_valid_kubernetes(network: str, agent: str | None):
    settings = KubeSettings(runtime_class="gvisor", image_pull_secrets=["pull"], node_selector={"pool": "rollouts"},
                            tolerations=[{"key": "rollouts", "operator": "Exists", "effect": "NoSchedule"}])
    assert schema_errors(pod(settings, network=network, agent_user=agent, cpus=2, memory_mb=512, storage_mb=300)) == []
    assert schema_errors(network_policy("run-1", network, settings)) == []  # type: ignore[arg-type]


def test_a_pod_is_bare_bounded_and_hardened():
    manifest = pod(agent_user="agent", cpus=2, memory_mb=512, storage_mb=300)
    body, container = manifest["spec"], manifest["spec"]["containers"][0]
    assert body["restartPolicy"] == "Never" and "ownerReferences" not in manifest["metadata"]
    assert body["automountServiceAccountToken"] is False and body["enableServiceLinks"] is False
    assert body["activeDeadlineSeconds"] == math.ceil(1000 + KubeSettings().deadline_margin_sec)
    assert container["resources"]["requests"] == container["resources"]["limits"] == {
        "cpu": "2000m", "memory": "512Mi", "ephemeral-storage": "300Mi"}
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and security["allowPrivilegeEscalation"] is False
    assert security["seccompProfile"] == {"type": "RuntimeDefault"} and security["privileged"] is False
    assert body["securityContext"]["runAsNonRoot"] is True and body["securityContext"]["runAsUser"] == 1000
    assert manifest["metadata"]["labels"][LABEL_TASK] == "hello"


def test_a_task_whose_agent_is_root_gets_the_root_profile_with_only_docker_s_capabilities():
    security = pod(agent_user="root")["spec"]["containers"][0]["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"] and "SYS_ADMIN" not in security["capabilities"]["add"]
    assert security["allowPrivilegeEscalation"] is False
    assert pod(KubeSettings(profile="root"), agent_user="agent")["spec"]["securityContext"]["runAsUser"] == 0


def test_an_isolated_pod_may_reach_the_proxy_and_dns_and_nothing_else():
    policy = network_policy("run-1", "isolated", KubeSettings(namespace="forge"))
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["ingress"] == []
    to_proxy, to_dns = policy["spec"]["egress"]
    assert to_proxy["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-proxy"}}}]
    assert to_proxy["ports"] == [{"protocol": "TCP", "port": 8081}]  # the model API alone, never the admin port
    assert {port["port"] for port in to_dns["ports"]} == {53}
    # reached by address instead of by name: no DNS at all, the address itself allowed
    by_ip = network_policy("run-1", "isolated", KubeSettings(proxy_host="10.96.0.15"))["spec"]["egress"]
    assert len(by_ip) == 1 and {"ipBlock": {"cidr": "10.96.0.15/32"}} in by_ip[0]["to"]
    assert network_policy("run-1", "none", KubeSettings())["spec"]["egress"] == []


def test_the_proxy_deployment_and_service_are_valid_and_take_the_token_from_a_secret():
    documents = proxy_manifests(KubeSettings(namespace="forge"), image="registry.example/forge:0.1", model="smollm2",
                                engine_url="http://vllm.forge.svc:8000")
    assert [schema_errors(doc) for doc in documents] == [[], []]
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "forge-proxy-admin"
    assert container["command"][container["command"].index("--model-listen") + 1] == "0.0.0.0:8081"
    assert {port["port"] for port in documents[1]["spec"]["ports"]} == {8080, 8081}


def test_proxy_replicas_are_a_stateful_set_each_reached_by_its_own_name():
    """A rollout's calls and admin calls must reach the same proxy: replicas get stable names (a headless
    Service), never one load-balanced address, and the run config names each one."""
    settings = KubeSettings(namespace="forge")
    stateful, service = proxy_manifests(settings, image="registry.example/forge:0.1", model="smollm2",
                                        engine_url="http://vllm.forge.svc:8000", replicas=3)
    assert [schema_errors(stateful), schema_errors(service)] == [[], []]
    assert (stateful["kind"], stateful["spec"]["replicas"], service["spec"]["clusterIP"]) == ("StatefulSet", 3, "None")
    assert stateful["spec"]["serviceName"] == service["metadata"]["name"] == "forge-proxy"
    pod = stateful["spec"]["template"]
    assert pod["metadata"]["labels"] == settings.proxy_labels  # what the sandboxes' NetworkPolicy lets them reach
    assert "--workers" not in pod["spec"]["containers"][0]["command"]  # one process per replica: its own shard
    assert proxy_shards(settings, 2) == [
        {"url": "http://forge-proxy-0.forge-proxy.forge.svc:8080",
         "sandbox_url": "http://forge-proxy-0.forge-proxy.forge.svc:8081"},
        {"url": "http://forge-proxy-1.forge-proxy.forge.svc:8080",
         "sandbox_url": "http://forge-proxy-1.forge-proxy.forge.svc:8081"}]
    one = proxy_manifests(settings, image="i", model="m", engine_url="http://e", replicas=1)
    assert [doc["kind"] for doc in one] == ["Deployment", "Service"]


def test_forge_k8s_proxy_with_replicas_prints_the_run_config_that_names_them():
    _register()
    result = CliRunner().invoke(cli, ["k8s", "proxy", "--image", "registry.example/forge:0.1", "--engine-url",
                                      "http://vllm.forge.svc:8000", "--namespace", "forge", "--replicas", "2"])
    assert result.exit_code == 0, result.output
    assert [doc["kind"] for doc in yaml.safe_load_all(result.output)] == ["StatefulSet", "Service"]
    comment = "\n".join(line.removeprefix("#   ") for line in result.output.splitlines() if line.startswith("#   "))
    proxy = ProxySettings.model_validate(yaml.safe_load(comment)["proxy"])
    assert [shard.url for shard in proxy.shards] == ["http://forge-proxy-0.forge-proxy.forge.svc:8080",
                                                     "http://forge-proxy-1.forge-proxy.forge.svc:8080"]
    assert proxy.url == proxy.shards[0].url and proxy.sandbox_url == proxy.shards[0].sandbox_url


def test_forge_k8s_manifest_prints_the_policy_and_the_pod_of_a_task(tmp_path: Path):
    _register()
    task = write_task(tmp_path, "hello", image="registry.example/forge/hello:1", environment={"memory_mb": 768})
    result = CliRunner().invoke(cli, ["k8s", "manifest", str(task), "--namespace", "forge"])
    assert result.exit_code == 0, result.output
    policy, manifest = list(yaml.safe_load_all(result.output))
    assert (policy["kind"], manifest["kind"]) == ("NetworkPolicy", "Pod")
    assert schema_errors(policy) == [] and schema_errors(manifest) == []
    assert manifest["spec"]["containers"][0]["resources"]["limits"]["memory"] == "768Mi"
    assert manifest["metadata"]["namespace"] == "forge"
    missing = CliRunner().invoke(cli, ["k8s", "manifest", str(write_task(tmp_path, "bare"))])
    assert missing.exit_code != 0 and "docker_image" in str(missing.exception or missing.output)
