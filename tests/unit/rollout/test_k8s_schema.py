"""Kubernetes manifests checked offline against the strict schema of K8S_VERSION: the hardened Pod, the egress
NetworkPolicy and a Deployment+Service pass; a misspelt field, a wrong type and a missing required field each fail
with their path."""

from __future__ import annotations

import time
from typing import Any

import pytest

from openforgerl.testing.k8s_schema import K8S_VERSION, schema_errors

pytest.importorskip("kubernetes_validate", reason="needs the dev extra (kubernetes-validate==1.37.0)")

RESOURCES = {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "4Gi"}
LABELS = {"app.kubernetes.io/name": "forge-sandbox", "app.kubernetes.io/managed-by": "openforgerl"}


def hardened_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "forge-sandbox-0", "namespace": "forge", "labels": LABELS},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 3600,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "runtimeClassName": "gvisor",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "sandbox",
                "image": "ghcr.io/example/forge-env@sha256:" + "0" * 64,
                "command": ["sleep", "infinity"],
                "env": [{"name": "HTTP_PROXY", "value": "http://forge-proxy:8080"}],
                "resources": {"requests": dict(RESOURCES), "limits": dict(RESOURCES)},
                "securityContext": {"allowPrivilegeEscalation": False, "privileged": False, "runAsNonRoot": True,
                                    "readOnlyRootFilesystem": False, "capabilities": {"drop": ["ALL"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}},
            }],
        },
    }


def egress_policy() -> dict[str, Any]:
    dns = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "forge-sandbox-egress", "namespace": "forge"},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-sandbox"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-proxy"}}}],
                 "ports": [{"protocol": "TCP", "port": 8080}]},
                {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
                 "ports": dns},
            ],
        },
    }


def proxy_deployment_and_service() -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "forge-proxy"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "forge-proxy", "namespace": "forge", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [{
                        "name": "proxy",
                        "image": "ghcr.io/example/forge-proxy:0.1.0",
                        "args": ["forge", "proxy", "--port", "8080"],
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 2},
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                      "limits": {"cpu": 1, "memory": "512Mi"}},
                    }],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "forge-proxy", "namespace": "forge", "labels": labels},
        "spec": {"type": "ClusterIP", "selector": labels,
                 "ports": [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]},
    }
    return [deployment, service]


@pytest.mark.parametrize("manifest", [hardened_pod(), egress_policy(), *proxy_deployment_and_service()],
                         ids=["pod", "networkpolicy", "deployment", "service"])
def test_valid_manifests_have_no_errors(manifest: dict[str, Any]):
    assert schema_errors(manifest) == []


def test_a_misspelt_field_is_an_unknown_field_at_its_own_path():
    pod = hardened_pod()
    pod["spec"]["restartPolicyy"] = pod["spec"].pop("restartPolicy")
    pod["spec"]["containers"][0]["securityContext"]["capabilites"] = {"drop": ["ALL"]}
    assert schema_errors(pod) == [
        f"spec.containers[0].securityContext.capabilites: unknown field in Kubernetes {K8S_VERSION}",
        f"spec.restartPolicyy: unknown field in Kubernetes {K8S_VERSION}",
    ]


def test_a_wrong_type_names_the_path_and_the_expected_type():
    pod = hardened_pod()
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = "x"
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": 1}
    assert schema_errors(pod) == [
        "metadata.labels['app.kubernetes.io/name']: 1 is not of type 'string'",
        "spec.containers[0].securityContext.runAsUser: 'x' is not of type 'integer'",
    ]


def test_a_missing_required_field_is_named_by_its_path():
    deployment, _ = proxy_deployment_and_service()
    del deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    del deployment["spec"]["selector"]
    assert schema_errors(deployment) == [
        "spec.selector: required field missing",
        "spec.template.spec.containers[0].name: required field missing",
    ]


def test_a_policy_port_that_is_neither_number_nor_name_fails():
    policy = egress_policy()
    policy["spec"]["egress"][0]["ports"][0]["port"] = [8080]
    assert schema_errors(policy) == ["spec.egress[0].ports[0].port: [8080] is not valid under any of the given schemas"]


def test_an_unknown_kind_or_missing_kind_is_an_error_and_an_unshipped_version_raises():
    assert schema_errors({"apiVersion": "v1", "kind": "Sandbox"}) == [
        f"kind: no Kubernetes {K8S_VERSION} schema for Sandbox in v1"]
    assert schema_errors({"apiVersion": "v1"}) == ["kind: required field missing"]
    with pytest.raises(ValueError, match="no schemas for Kubernetes '1.10'"):
        schema_errors(hardened_pod(), version="1.10")


def test_validation_is_fast_once_the_schema_is_loaded():
    manifests = [hardened_pod(), egress_policy(), *proxy_deployment_and_service()]
    for manifest in manifests:
        schema_errors(manifest)
    started = time.perf_counter()
    for _ in range(20):
        for manifest in manifests:
            assert schema_errors(manifest) == []
    assert (time.perf_counter() - started) / 80 < 0.05
