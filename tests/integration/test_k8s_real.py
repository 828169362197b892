"""One real rollout on a real Kubernetes cluster: a pod per rollout, its policy, exec, copies, the verifier,
and nothing left behind. Gated: set FORGE_K8S_CONTEXT (a kubeconfig context), FORGE_K8S_NAMESPACE (default
``forge``) and FORGE_K8S_IMAGE (an image the cluster can pull whose /app is writable by uid 1000, e.g. a task
published with forge build-env --push). See docs/kubernetes.md."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.tasks import write_task

CONTEXT = os.environ.get("FORGE_K8S_CONTEXT")
pytestmark = pytest.mark.skipif(not CONTEXT, reason="no cluster here: set FORGE_K8S_CONTEXT (and FORGE_K8S_IMAGE) "
                                                    "to run one rollout on a real Kubernetes cluster")


class Solver(Harness):
    name = "solver"
    uses_model = False

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["sh", "-c", "echo hi > /app/hello.txt"])


def test_one_rollout_on_a_real_cluster(tmp_path: Path):
    image = os.environ.get("FORGE_K8S_IMAGE")
    if not image:
        pytest.skip("set FORGE_K8S_IMAGE to an image the cluster pulls")
    namespace = os.environ.get("FORGE_K8S_NAMESPACE", "forge")
    task = write_task(tmp_path / "tasks", "hello", image=image)
    config = RolloutConfig(tasks=[str(task)], harness="nop", run_dir=str(tmp_path / "run"),
                           runtime={"type": "kubernetes", "context": CONTEXT, "namespace": namespace})
    _, results = asyncio.run(run_rollouts(config, harness=Solver()))
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)], results[0].reason
    from kubernetes import client
    from kubernetes import config as kube_config
    api = client.CoreV1Api(kube_config.new_client_from_config(context=CONTEXT))
    left = api.list_namespaced_pod(namespace, label_selector=f"openforgerl.rollout={results[0].rollout_id}").items
    assert left == [], "the rollout's pod was left behind"
