"""The kubernetes runtime against a fake cluster (kmock's API server, a simulated kubelet, real exec over
``v4.channel.k8s.io``): pod lifecycle, exec, copies, the failure taxonomy as the API reports it, the reaper,
and the orchestrator's statuses with the same expectations as on Docker.

Pods of the fake kubelet are processes of this host in their own mount and PID namespaces (root only).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from orchestration import statuses

from openforgerl.errors import SandboxError, UserError
from openforgerl.rollout.harness import AgentContext, Harness, Invocation
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.rollout.runtime import LABEL_OWNER_PID, LABEL_ROLLOUT, LABEL_RUN, SandboxSpec
from openforgerl.rollout.runtimes.kubernetes import KubernetesRuntime, KubernetesRuntimeConfig
from openforgerl.testing.kube import ExecFaults, FakeCluster
from openforgerl.testing.tasks import write_task

namespaces = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"),
                                reason="the fake kubelet's pods are namespaces of this host: needs root, unshare and "
                                       "nsenter")
IMAGE = "registry.example/forge/hello:1"
pytestmark = pytest.mark.k8s


def runtime_for(cluster: FakeCluster, tmp_path: Path, **settings: Any) -> KubernetesRuntime:
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig.yaml")
    return KubernetesRuntime(KubernetesRuntimeConfig(kubeconfig=str(kubeconfig), context="fake", **settings))


def spec(rollout: str = "r-1", **kw: Any) -> SandboxSpec:
    return SandboxSpec(**{"image": IMAGE, "labels": {LABEL_RUN: "run-1", LABEL_ROLLOUT: rollout}, "deadline_sec": 600,
                          **kw})


def in_cluster(test: Callable[..., Awaitable[None]], **cluster_kw: Any) -> Callable[[Path], None]:
    """Run ``test(cluster, runtime)`` inside a fresh cluster; the runtime is released after it."""
    settings = cluster_kw.pop("settings", {})

    def run(tmp_path: Path) -> None:
        async def main() -> None:
            async with FakeCluster(**cluster_kw) as cluster:
                runtime = runtime_for(cluster, tmp_path, **settings)
                try:
                    await test(cluster, runtime)
                finally:
                    await runtime.release()
                assert cluster.pods() == [], "a pod was left behind"
        asyncio.run(main())
    return run


def test_a_sandbox_is_a_pod_created_after_its_run_s_policy_and_deleted_on_stop(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec()) as box:
            [pod] = cluster.pods()
            [policy] = cluster.objects("networkpolicies")
            assert int(policy["metadata"]["resourceVersion"]) < int(pod["metadata"]["resourceVersion"])
            assert pod["metadata"]["labels"][LABEL_RUN] == "run-1" and (await box.health()).running
        assert cluster.pods() == [] and len(cluster.objects("networkpolicies")) == 1  # the policy lives with the run
        await runtime.release()
        assert cluster.objects("networkpolicies") == []
    in_cluster(test, isolation="none")(tmp_path)


def test_pod_state_comes_from_one_informer_never_a_get_per_pod(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async def one(index: int) -> None:
            async with runtime.sandbox(spec(f"r-{index}")) as box:
                for _ in range(3):
                    assert (await box.health()).running
        await asyncio.gather(*(one(index) for index in range(20)))
        calls = cluster.api_calls()
        assert calls["POST pods"] == 20 and calls["DELETE pods"] == 20
        assert calls["GET pods"] <= 2 and calls["WATCH pods"] <= 2, calls  # the informer's LIST and WATCH
        assert not any(key.startswith("GET pods/") for key in calls), calls  # no per-pod read
    in_cluster(test, isolation="none", start_delay=0.05)(tmp_path)


@pytest.mark.parametrize(("row", "why"), [("missing", "ErrImagePull"), ("unschedulable", "Unschedulable")])
def test_a_pod_that_never_runs_is_an_infra_error_naming_why(tmp_path: Path, row: str, why: str):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        if row == "unschedulable":
            async def unschedulable() -> None:
                while not cluster.pods():
                    await asyncio.sleep(0.02)
                name = cluster.pods()[0]["metadata"]["name"]
                await cluster.set_pod_status("default", name, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: 3 Insufficient cpu."}]})
            asyncio.get_running_loop().create_task(unschedulable())
        started = time.monotonic()
        with pytest.raises(SandboxError, match=why):
            await runtime.start(spec(image="registry.example/missing:1") if row == "missing" else spec())
        assert time.monotonic() - started < 10
    missing = ["registry.example/missing:1"]
    settings = {"startup_timeout_sec": 1.0}
    kw: dict[str, Any] = {"missing_images": missing} if row == "missing" else {"start_delay": 3600}
    in_cluster(test, isolation="none", settings=settings, **kw)(tmp_path)


@pytest.mark.parametrize(("status", "running", "deadline"), [
    ({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}, False, False),
    ({"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the "
                                                                  "specified deadline"}, False, True),
    ({"phase": "Running", "reason": "NodeLost", "message": "Node n1 which was running pod is unresponsive"},
     False, False),
])
def test_a_pod_ending_under_a_sandbox_shows_in_its_health(tmp_path: Path, status: dict, running: bool,
                                                           deadline: bool):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec()) as box:
            await cluster.set_pod_status("default", box.id, status)
            for _ in range(100):
                health = await box.health()
                if not health.running:
                    break
                await asyncio.sleep(0.02)
            assert (health.running, health.deadline) == (running, deadline) and status["reason"] in health.detail
    in_cluster(test, isolation="none")(tmp_path)


def test_a_pod_deleted_by_someone_else_is_gone(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec()) as box:
            await asyncio.to_thread(runtime.core.delete_namespaced_pod, box.id, "default")
            for _ in range(100):
                if not (await box.health()).running:
                    break
                await asyncio.sleep(0.02)
            assert "deleted" in (await box.health()).detail
    in_cluster(test, isolation="none")(tmp_path)


def test_sweep_deletes_pods_whose_owner_died_and_pods_that_ended(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        orphan = runtime_for(cluster, tmp_path)
        box = await orphan.start(spec("orphan"))
        labels = {LABEL_OWNER_PID: str(dead.pid)}
        await asyncio.to_thread(runtime.core.patch_namespaced_pod, box.id, "default", {"metadata": {"labels": labels}})
        ended = await orphan.start(spec("ended"))
        await cluster.set_pod_status("default", ended.id, {"phase": "Failed", "reason": "DeadlineExceeded"})
        async with runtime.sandbox(spec("live")) as live:
            await asyncio.sleep(0.2)
            assert await runtime.sweep() == 2
            assert [pod["metadata"]["name"] for pod in cluster.pods()] == [live.id]
        await orphan.release()
    in_cluster(test, isolation="none")(tmp_path)


@namespaces
def test_exec_copies_and_timeouts_in_a_pod(tmp_path: Path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("payload")
    for path in (tmp_path / "in", tmp_path / "in" / "a.txt"):  # as a non-root researcher's uid 1000 leaves them
        os.chown(path, 1000, 1000)
        path.chmod(0o777 if path.is_dir() else 0o666)

    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec()) as box:
            result = await box.exec(["sh", "-c", 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3'],
                                    env={"GREETING": "hi"}, cwd="/tests")
            assert (result.exit_code, result.stdout, result.stderr) == (3, "hi from /tests\n", "oops\n")
            await box.put(tmp_path / "in", "/app")
            assert (await box.exec(["cat", "/app/in/a.txt"])).stdout == "payload"
            owners = await box.exec(["stat", "-c", "%u:%g %a", "/app/in", "/app/in/a.txt"])
            assert owners.stdout == "0:0 755\n0:0 644\n", "what forge puts is root's in the pod, not the agent uid's"
            report = await box.get("/app/in", tmp_path / "out")
            assert (tmp_path / "out" / "in" / "a.txt").read_text() == "payload" and not report.truncated
            with pytest.raises(SandboxError, match="does not exist"):
                await box.get("/app/nothing", tmp_path / "none")
            for timeout in (1.0, 2.0):  # attached (coreutils timeout) and detached (recorder outside the group)
                runtime.config.attach_limit_sec = 1.5
                started = time.monotonic()
                slow = await box.exec(["sh", "-c", "echo started; sleep 100 & sleep 100"], timeout=timeout)
                assert slow.timed_out and slow.exit_code is None and time.monotonic() - started < timeout + 8
                left = await box.exec(["sh", "-c", "ps -eo args | grep -c '^sleep 100' || true"])
                assert left.stdout.strip() == "0", "the timed-out command's process group lives on"
            done = await box.exec(["sh", "-c", "sleep 2; echo done; exit 4"], timeout=30)
            assert (done.exit_code, done.stdout) == (4, "done\n")
    in_cluster(test, settings={"attach_limit_sec": 1.0})(tmp_path)


@namespaces
def test_ending_the_agent_kills_every_process_but_the_pod_s_keepalive(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec("a")) as box, runtime.sandbox(spec("b")) as other:
            await box.exec(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 & echo $! > /logs/pid"])
            await other.exec(["sh", "-c", "setsid sleep 301 > /dev/null 2>&1 &"])
            await box.end_processes("agent")
            state = await box.exec(["sh", "-c", "cut -d' ' -f3 /proc/$(cat /logs/pid)/stat 2>/dev/null || echo gone"])
            assert state.stdout.strip() in ("Z", "gone")  # dead (a zombie: the keepalive is no init that reaps)
            assert (await box.health()).running
            alive = await other.exec(["sh", "-c", "ps -eo args | grep -c '^sleep 301'"])
            assert alive.stdout.strip() == "1", "another pod's processes were killed"
    in_cluster(test)(tmp_path)


class DropOnce(ExecFaults):
    """Drops the stream of the first exec after ``armed`` that prints anything (each exec reads the fault once)."""

    armed = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "drop_after_bytes" and object.__getattribute__(self, "armed"):
            self.armed -= 1
            return 1
        return object.__getattribute__(self, name)


@namespaces
def test_exec_survives_a_throttled_handshake_and_a_dropped_stream(tmp_path: Path):
    faults = DropOnce()

    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        async with runtime.sandbox(spec()) as box:
            faults.reject_upgrades_429 = 2
            assert (await box.exec(["echo", "through"])).stdout == "through\n"
            assert faults.reject_upgrades_429 == 0
            faults.armed = 2  # start (prints nothing), then its first wait: dropped; asked again, never rerun
            runtime.config.attach_limit_sec = 0.5
            result = await box.exec(["sh", "-c", "sleep 0.3; echo once >> /logs/runs; echo ok"], timeout=20)
            assert faults.armed == 0 and (result.exit_code, result.stdout) == (0, "ok\n")
            assert (await box.exec(["cat", "/logs/runs"])).stdout == "once\n"
            faults.omit_status = True
            with pytest.raises(SandboxError, match="without an exit status"):
                await box.exec(["true"])
            faults.omit_status = False
    in_cluster(test, faults=faults, settings={"retries": 3})(tmp_path)


class Shell(Harness):
    """An agent that is a shell script run in the pod."""

    name = "shell"
    uses_model = False

    def __init__(self, script: str, memory_mb: int | None = None) -> None:
        self.script = script
        self.memory_mb = memory_mb

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["sh", "-c", self.script])


async def _evict_first_pod(cluster: FakeCluster, status: dict[str, Any], marker: str) -> None:
    """Play a node's trouble: once the first pod's agent has written ``marker``, end the pod with ``status``."""
    while True:
        for key, pid in list(cluster.processes.items()):
            if Path(f"/proc/{pid}/root{marker}").exists() or _pod_has(pid, marker):
                await cluster.set_pod_status(key[0], key[1], status)
                return
        await asyncio.sleep(0.05)


def _pod_has(pid: int, path: str) -> bool:
    probe = subprocess.run(["nsenter", "-t", str(pid), "--mount", "--", "test", "-e", path], check=False)
    return probe.returncode == 0


def rollouts(tmp_path: Path, script: str, *, during: Callable[[FakeCluster], Awaitable[None]] | None = None,
             task: dict[str, Any] | None = None, cluster_kw: dict[str, Any] | None = None,
             harness_memory_mb: int | None = None, **config: Any) -> list[Any]:
    task_dir = write_task(tmp_path / "tasks", "hello", image=IMAGE, **(task or {}))

    async def main() -> list[Any]:
        async with FakeCluster(**(cluster_kw or {})) as cluster:
            kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig.yaml")
            runtime = {"type": "kubernetes", "kubeconfig": str(kubeconfig), "context": "fake", "attach_limit_sec": 1.0}
            cfg = RolloutConfig(tasks=[str(task_dir)], harness="nop", run_dir=str(tmp_path / "run"), runtime=runtime,
                                **config)
            trouble = asyncio.get_running_loop().create_task(during(cluster)) if during else None
            try:
                _, results = await run_rollouts(cfg, harness=Shell(script, harness_memory_mb))
            finally:
                if trouble:
                    trouble.cancel()
            assert cluster.pods() == [] and cluster.objects("networkpolicies") == [], "the run left objects behind"
            return results
    return asyncio.run(main())


@namespaces
@pytest.mark.parametrize(("script", "expected"), [
    ("echo hi > /app/hello.txt", [("success", 1.0)]),
    ("echo no > /app/hello.txt", [("failure", 0.0)]),
    ("exit 3", [("failure", 0.0)]),
])
def test_rollouts_on_kubernetes_end_as_on_docker(tmp_path: Path, script: str, expected: list):
    assert statuses(rollouts(tmp_path, script)) == expected


@namespaces
def test_an_agent_past_its_timeout_is_an_agent_timeout_and_is_killed(tmp_path: Path):
    results = rollouts(tmp_path, "echo hi > /app/hello.txt; sleep 600", agent_timeout_sec=2)
    assert statuses(results) == [("agent_timeout", 1.0)] and "agent ran past" in results[0].reason


@namespaces
@pytest.mark.parametrize(("script", "test_sh", "expected", "why"), [
    ("echo 'sleep 600' > /app/check.sh",
     "#!/bin/bash\nmkdir -p /logs/verifier\n[ -f /app/check.sh ] && bash /app/check.sh\n"
     "echo 0 > /logs/verifier/reward.txt\n", ("failure", 0.0), "on the agent's work"),
    ("true", "#!/bin/bash\nsleep 600\n", ("verifier_error", None), "untouched image too"),
])
def test_a_verifier_hang_is_put_on_the_agent_only_when_a_fresh_pod_s_verifier_ends(tmp_path: Path, script: str,
                                                                                    test_sh: str, expected, why: str):
    """The control run of a verifier that timed out is a pod of its own (no agent), removed with the rest."""
    results = rollouts(tmp_path, script, task={"test_sh": test_sh}, verifier_timeout_sec=3)
    assert statuses(results) == [expected] and why in results[0].reason, results[0].reason


@namespaces
def test_a_reward_the_agent_planted_never_counts(tmp_path: Path):
    plant = "mkdir -p /logs/verifier; echo '{\"reward\": 1}' > /logs/verifier/reward.json"
    results = rollouts(tmp_path, plant, task={"test_sh": "#!/bin/bash\ntrue\n"})
    assert statuses(results) == [("verifier_error", None)]


@namespaces
def test_an_eviction_under_the_agent_is_an_infra_error_retried_as_a_new_rollout(tmp_path: Path):
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}

    async def during(cluster: FakeCluster) -> None:
        await _evict_first_pod(cluster, evicted, "/logs/started")
    script = "touch /logs/started; sleep 3; echo hi > /app/hello.txt"
    results = rollouts(tmp_path, script, during=during, retry_infra=1)
    assert [(r.status, r.try_index) for r in results] == [("infra_error", 0), ("success", 1)]
    assert "Evicted" in results[0].reason


@namespaces
def test_an_eviction_for_the_agent_s_writes_is_a_policy_failure_with_reward_0(tmp_path: Path):
    evicted = {"phase": "Failed", "reason": "Evicted",
               "message": "Pod ephemeral local storage usage exceeds the total limit of containers 300Mi. "}

    async def during(cluster: FakeCluster) -> None:
        await _evict_first_pod(cluster, evicted, "/logs/started")
    started = time.monotonic()
    results = rollouts(tmp_path, "touch /logs/started; sleep 600", during=during, retry_infra=1,
                       task={"environment": {"storage_mb": 300}})
    assert statuses(results) == [("failure", 0.0)], [r.reason for r in results]
    assert results[0].sandbox["storage_exceeded_mb"] == 300
    assert time.monotonic() - started < 120  # it ended with its pod, not when the agent's command would have


@namespaces
def test_the_pod_s_deadline_passing_under_the_agent_is_an_agent_timeout(tmp_path: Path):
    deadline = {"phase": "Failed", "reason": "DeadlineExceeded",
                "message": "Pod was active on the node longer than the specified deadline"}

    async def during(cluster: FakeCluster) -> None:
        await _evict_first_pod(cluster, deadline, "/logs/started")
    started = time.monotonic()
    results = rollouts(tmp_path, "touch /logs/started; sleep 600", during=during, retry_infra=1)
    assert statuses(results) == [("agent_timeout", 0.0)], [r.reason for r in results]
    assert "deadline" in results[0].reason
    assert time.monotonic() - started < 120  # it ended with its pod, not when the agent's command would have


@namespaces
@pytest.mark.parametrize(("terminated", "expected"), [
    ({"exitCode": 143, "reason": "Error"}, [("failure", 0.0, 0)]),  # an init keepalive forwarded `kill 1`
    ({"exitCode": 137, "reason": "ContainerStatusUnknown"}, [("infra_error", None, 0), ("success", 1.0, 1)]),
])
def test_a_keepalive_ended_from_inside_is_the_agent_s_doing_and_one_the_node_lost_is_not(
        tmp_path: Path, terminated: dict, expected: list):
    ended = {"phase": "Failed", "containerStatuses": [{"name": "sandbox", "ready": False, "restartCount": 0,
                                                       "state": {"terminated": terminated}}]}

    async def during(cluster: FakeCluster) -> None:
        await _evict_first_pod(cluster, ended, "/logs/started")
    script = "touch /logs/started; sleep 3; echo hi > /app/hello.txt"
    results = rollouts(tmp_path, script, during=during, retry_infra=1)
    assert [(r.status, r.reward, r.try_index) for r in results] == expected, [r.reason for r in results]
    assert results[0].sandbox.get("ended_by_agent", False) == (expected[0][0] == "failure")


@namespaces
@pytest.mark.parametrize(("harness_memory_mb", "expected"), [
    (64, [("failure", 0.0, 0)]),  # 256 MB held the harness: the agent's work took the rest
    (512, [("infra_error", None, 0), ("success", 1.0, 1)]),  # the task's memory cannot hold the harness
    (None, [("infra_error", None, 0), ("success", 1.0, 1)]),  # a harness that declares nothing: as before
])
def test_a_keepalive_oom_killed_with_room_for_the_harness_is_the_agent_s_doing(
        tmp_path: Path, harness_memory_mb: int | None, expected: list):
    oom = {"phase": "Failed", "containerStatuses": [{"name": "sandbox", "ready": False, "restartCount": 0, "state": {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}

    async def during(cluster: FakeCluster) -> None:
        await _evict_first_pod(cluster, oom, "/logs/started")
    script = "touch /logs/started; sleep 3; echo hi > /app/hello.txt"
    results = rollouts(tmp_path, script, during=during, retry_infra=1, harness_memory_mb=harness_memory_mb,
                       task={"environment": {"memory_mb": 256}})
    assert [(r.status, r.reward, r.try_index) for r in results] == expected, [r.reason for r in results]
    assert results[0].sandbox.get("ended_by_agent", False) == (expected[0][0] == "failure")
    if harness_memory_mb == 512:
        assert "memory_mb = 256 is under the 512 MB shell needs" in results[0].reason


def test_a_missing_image_is_an_infra_error_per_rollout(tmp_path: Path):
    results = rollouts(tmp_path, "true", cluster_kw={"missing_images": [IMAGE], "isolation": "none"})
    assert statuses(results) == [("infra_error", None)] and "ErrImagePull" in results[0].reason


def test_host_network_and_an_in_run_proxy_are_refused_with_the_fix(tmp_path: Path):
    async def test(cluster: FakeCluster, runtime: KubernetesRuntime) -> None:
        with pytest.raises(UserError, match="network=host"):
            await runtime.reach({"host"})
        assert (await runtime.reach({"isolated"}))["isolated"].address == "forge-proxy.default.svc"
    in_cluster(test, isolation="none")(tmp_path)


def test_a_root_pod_switches_to_the_agent_s_user_and_a_non_root_pod_has_no_other(tmp_path: Path):
    from openforgerl.rollout.runtimes.kubernetes import KubernetesSandbox
    runtime = KubernetesRuntime(KubernetesRuntimeConfig())
    root = KubernetesSandbox(runtime, "p", spec(), "root")
    argv = root._argv(["id"], "agent", {"A": "1"}, "/app")
    assert argv[:5] == ["setpriv", "--reuid=agent", "--regid=agent", "--init-groups", "--"]
    assert argv[5:9] == ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "forge-cd"]
    assert argv[-3:] == ["env", "A=1", "id"]
    assert root._argv(["id"], "0", None, None) == ["id"]  # the framework's housekeeping stays root
    assert KubernetesSandbox(runtime, "p", spec(), "nonroot")._argv(["id"], "agent", None, None) == ["id"]


def test_forge_rollout_takes_the_kube_context_and_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from openforgerl.cli import _register, cli
    seen: list[RolloutConfig] = []
    monkeypatch.setattr("openforgerl.cli.interrupt.run_interruptibly", lambda coro: coro.close())
    monkeypatch.setattr("openforgerl.cli.rollout_view.run_with_progress", lambda config: seen.append(config) or _noop())
    _register()
    task = write_task(tmp_path, image=IMAGE)
    result = CliRunner().invoke(cli, ["rollout", str(task), "--kube-context", "kind-forge", "--namespace", "forge"])
    assert result.exit_code == 0, result.output
    assert seen[0].runtime.type == "kubernetes"
    assert (seen[0].runtime.context, seen[0].runtime.namespace) == ("kind-forge", "forge")  # type: ignore[attr-defined]


async def _noop() -> None:
    return None


class ModelShell(Shell):
    """A shell agent that calls the model through the proxy URL and token the run hands it."""

    uses_model = True

    def invocation(self, ctx: AgentContext) -> Invocation:
        return Invocation(["sh", "-c", self.script], env={"BASE": ctx.base_url, "KEY": ctx.api_key})


@namespaces
def test_a_model_calling_harness_reaches_a_proxy_the_pods_know_by_name(tmp_path: Path):
    """On a cluster, pods reach the proxy by a DNS name (its Service, here ``localhost``): the run hands each
    harness that name's URL and the rollout's token, and the call is recorded in the rollout's trajectory.
    (The named address once crashed the run: ``ip_address('forge-proxy.<ns>.svc')`` raised ValueError.)"""
    from openforgerl.rollout.proxy.engine import ScriptTurn
    from openforgerl.rollout.proxy_handle import listen
    from openforgerl.testing.proxy import ADMIN_TOKEN, InProcessProxy

    task_dir = write_task(tmp_path / "tasks", "hello", image=IMAGE)
    script = ('curl -sf -X POST "$BASE/v1/chat/completions" -H "authorization: Bearer $KEY" '
              '-H "content-type: application/json" -d \'{"model": "m", "messages": [{"role": "user", '
              '"content": "hi"}]}\' > /app/answer.json && echo hi > /app/hello.txt')
    proxy = InProcessProxy([ScriptTurn(text="ok")])

    async def main() -> list[Any]:
        server, serving, port = await listen(proxy.app, "127.0.0.1", 0)
        try:
            async with FakeCluster() as cluster:
                runtime = {"type": "kubernetes", "kubeconfig": str(cluster.kubeconfig(tmp_path / "kubeconfig.yaml")),
                           "context": "fake", "attach_limit_sec": 1.0, "proxy_host": "localhost"}
                cfg = RolloutConfig(tasks=[str(task_dir)], harness="nop", run_dir=str(tmp_path / "run"),
                                    runtime=runtime, proxy={"url": f"http://127.0.0.1:{port}",
                                                            "sandbox_url": f"http://localhost:{port}",
                                                            "admin_token": ADMIN_TOKEN})
                _, results = await run_rollouts(cfg, harness=ModelShell(script))
                assert cluster.pods() == []
                return results
        finally:
            server.should_exit = True
            await serving
    results = asyncio.run(main())
    assert statuses(results) == [("success", 1.0)], results[0].reason
    (rollout,) = [r for r in proxy.registry.by_id.values()]
    assert [c.status for c in rollout.trajectory.calls] == ["ok"]
