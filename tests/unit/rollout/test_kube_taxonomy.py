"""The kubernetes runtime's failure taxonomy, row by row, on pod statuses as real clusters report them.

Each row says what a rollout whose pod shows that status ends as: a pod that never starts is an
infra error at once (or at the startup budget while it is unschedulable); a pod that ends under the
agent is an infra error, unless its own deadline ended it (an agent timeout).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openforgerl.rollout.runtimes.kubernetes import PodState, pending_reason, pod_health, startup_verdict

FIXTURES = json.loads((Path(__file__).parents[2] / "data" / "k8s" / "pod_statuses.json").read_text())


def state(row: str) -> PodState:
    return PodState(obj={"metadata": {"name": "forge-r-1"}, "status": FIXTURES[row]})


@pytest.mark.parametrize(("row", "verdict"), [
    ("running", "running"),
    ("err_image_pull", "ErrImagePull for img"),
    ("image_pull_backoff", "ImagePullBackOff for img"),
    ("crash_before_start", "CreateContainerConfigError for img"),
    ("evicted", "Failed before it ran: Evicted"),
    ("deadline_exceeded", "Failed before it ran: DeadlineExceeded"),
    ("unschedulable", None),  # may still be scheduled: waited for until the startup budget
])
def test_startup_says_at_once_when_a_pod_will_never_run(row: str, verdict: str | None):
    said = startup_verdict(state(row), "img")
    assert (said is None) if verdict is None else said.startswith(verdict)


def test_an_unschedulable_pod_names_why_when_the_startup_budget_runs_out():
    assert pending_reason(FIXTURES["unschedulable"] and state("unschedulable").obj).startswith(
        "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu")


@pytest.mark.parametrize(("row", "running", "oom", "deadline", "detail"), [
    ("running", True, False, False, ""),
    ("evicted", False, False, False, "Evicted"),
    ("node_lost", False, False, False, "NodeLost"),
    ("preempted", False, False, False, "PreemptionByScheduler"),
    ("oom_killed", False, True, False, "OOM"),
    ("keepalive_exited", False, False, False, "exit 127"),
    ("container_status_unknown", False, False, False, "ContainerStatusUnknown"),
    ("deadline_exceeded", False, False, True, "DeadlineExceeded"),
])
def test_a_pod_that_ends_under_the_agent_says_why(row: str, running: bool, oom: bool, deadline: bool, detail: str):
    health = pod_health(state(row))
    assert (health.running, health.oom_killed, health.deadline) == (running, oom, deadline)
    assert detail in health.detail


def test_a_keepalive_ended_by_a_signal_nothing_outside_sent_was_ended_from_inside():
    """An init keepalive (tini) forwards a root agent's `kill 1`: the pod fails with exit 143 and no reason of the
    kubelet's. Not an infra error to discard (a way out of every failure), the agent's doing."""
    health = pod_health(state("keepalive_ended_from_inside"))
    assert not health.running and health.ended_from_inside and "exit 143" in health.detail
    for row in ("keepalive_exited", "container_status_unknown", "oom_killed", "evicted", "node_lost", "preempted",
                "deadline_exceeded"):  # a keepalive that never ran, or ended by the node or the kubelet
        assert not pod_health(state(row)).ended_from_inside, row
    deleting = state("keepalive_ended_from_inside")
    assert deleting.obj is not None
    deleting.obj["metadata"]["deletionTimestamp"] = "2026-11-30T10:03:39Z"  # killed as its pod was deleted
    assert not pod_health(deleting).ended_from_inside


def test_an_eviction_for_the_pod_s_own_storage_is_the_agent_s_doing():
    health = pod_health(state("evicted_for_storage"))
    assert not health.running and health.storage_exceeded and "300Mi" in health.detail
    assert not pod_health(state("evicted")).storage_exceeded  # the node ran short: not the agent's doing


def test_a_pod_being_deleted_or_gone_is_not_running():
    deleting = state("running")
    assert deleting.obj is not None
    deleting.obj["metadata"]["deletionTimestamp"] = "2026-11-30T10:09:40Z"
    assert not pod_health(deleting).running
    assert not pod_health(PodState(obj=None, gone=True)).running
    assert startup_verdict(PodState(gone=True), "img") == "deleted before it ran"
