"""The fake Kubernetes cluster speaks the real protocols: the official client drives pods and exec through it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from openforgerl.processes import is_alive

pytest.importorskip("kmock")
kubernetes = pytest.importorskip("kubernetes")
from kubernetes.stream import stream  # noqa: E402

from openforgerl.testing.kube import ExecFaults, FakeCluster  # noqa: E402

pytestmark = pytest.mark.k8s
needs_namespaces = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                      reason="pod namespaces need root and unshare")
PROTOCOL = "v4.channel.k8s.io"


def pod(name: str, *, image: str = "busybox:1", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"]}], **spec}}


def client(kubeconfig: Path) -> Any:
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), context="fake", client_configuration=config)
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))


def run_pod(api: Any, name: str, **kwargs: Any) -> None:
    """Create the pod and block until a watch shows it Running."""
    api.create_namespaced_pod("default", pod(name, **kwargs))
    watch = kubernetes.watch.Watch()
    for event in watch.stream(api.list_namespaced_pod, "default", field_selector=f"metadata.name={name}",
                              timeout_seconds=10):
        if event["object"].status.phase == "Running":
            watch.stop()
            return
    raise AssertionError(f"pod {name} never ran")


def execute(api: Any, name: str, command: list[str], stdin: str | None = None) -> tuple[str, str, int]:
    """Run ``command`` in the pod through the official client's websocket exec: stdout, stderr, exit code."""
    resp = stream(api.connect_get_namespaced_pod_exec, name, "default", command=command, stderr=True,
                  stdin=stdin is not None, stdout=True, tty=False, _preload_content=False)
    if stdin is not None:
        resp.write_stdin(stdin)
    resp.run_forever(timeout=10)
    return resp.read_stdout(), resp.read_stderr(), resp.returncode


def scenario(test: Callable[[FakeCluster], Awaitable[None]], **kwargs: Any) -> None:
    async def main() -> None:
        async with FakeCluster(**kwargs) as cluster:
            await test(cluster)
    asyncio.run(main())


async def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.02)


def test_official_client_runs_pods_and_exec(tmp_path: Path) -> None:
    async def test(cluster: FakeCluster) -> None:
        api = client(cluster.kubeconfig(tmp_path / "kubeconfig"))
        await asyncio.to_thread(run_pod, api, "a", labels={"app": "x"})
        status = cluster.pods()[0]["status"]
        assert status["podIP"] and status["startTime"]
        assert status["containerStatuses"][0]["state"]["running"] and status["containerStatuses"][0]["ready"]

        out, err, code = await asyncio.to_thread(execute, api, "a", ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (out, err, code) == ("out\n", "err\n", 3)
        assert await asyncio.to_thread(execute, api, "a", ["head", "-c", "5"], "hello world") == ("hello", "", 0)

        listed = await asyncio.to_thread(api.list_namespaced_pod, "default", label_selector="app=x")
        assert [p.metadata.name for p in listed.items] == ["a"]
        assert not (await asyncio.to_thread(api.list_namespaced_pod, "default", label_selector="app!=x")).items
        await cluster.set_pod_status("default", "a", {"phase": "Succeeded"})  # a kubelet write, not an API call
        await asyncio.to_thread(api.delete_namespaced_pod, "a", "default")
        assert cluster.pods() == []
        assert cluster.api_calls() == {"POST pods": 1, "WATCH pods": 1, "EXEC pods/exec": 2, "GET pods": 2,
                                       "DELETE pods": 1}

    scenario(test, isolation="none")


@needs_namespaces
def test_pods_are_isolated_from_each_other_and_the_host(tmp_path: Path) -> None:
    async def test(cluster: FakeCluster) -> None:
        api = client(cluster.kubeconfig(tmp_path / "kubeconfig"))
        await asyncio.gather(asyncio.to_thread(run_pod, api, "a"), asyncio.to_thread(run_pod, api, "b"))
        a, b = cluster.processes["default", "a"], cluster.processes["default", "b"]
        out, _, code = await asyncio.to_thread(execute, api, "a", ["sh", "-c", "echo secret > /logs/x; cat /logs/x"])
        assert (out, code) == ("secret\n", 0)
        assert (await asyncio.to_thread(execute, api, "b", ["test", "-e", "/logs/x"]))[2] == 1
        assert not Path("/logs/x").exists()

        sleeper, _, _ = await asyncio.to_thread(
            execute, api, "b", ["sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $!"])
        _, _, code = await asyncio.to_thread(execute, api, "a", ["sh", "-c", "sleep 300 & kill -KILL -1"])
        assert code == 0
        assert is_alive(a) and is_alive(b)
        assert (await asyncio.to_thread(execute, api, "b", ["kill", "-0", sleeper.strip()]))[2] == 0

        await asyncio.to_thread(api.delete_namespaced_pod, "b", "default")
        await wait_for(lambda: not is_alive(b))
        assert ("default", "b") not in cluster.processes and is_alive(a)

    scenario(test)


def test_kubelet_reports_missing_images_and_deadlines() -> None:
    async def test(cluster: FakeCluster) -> None:
        def status(name: str) -> dict[str, Any]:
            return next((p["status"] for p in cluster.pods() if p["metadata"]["name"] == name), {})

        def waiting(name: str) -> dict[str, Any]:
            return status(name).get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {})

        async with aiohttp.ClientSession(cluster.url) as http:
            for manifest in (pod("pull", image="nowhere/missing:1"), pod("slow", activeDeadlineSeconds=1)):
                async with http.post("/api/v1/namespaces/default/pods", json=manifest) as resp:
                    assert resp.status < 300
            await wait_for(lambda: waiting("pull").get("reason") == "ErrImagePull")
            assert status("pull")["phase"] == "Pending" and "nowhere/missing:1" in waiting("pull")["message"]
            await wait_for(lambda: waiting("pull").get("reason") == "ImagePullBackOff")

            await wait_for(lambda: status("slow").get("phase") == "Running")
            ws = await http.ws_connect("/api/v1/namespaces/default/pods/slow/exec", protocols=[PROTOCOL], params=[
                ("command", "sleep"), ("command", "300"), ("stdout", "true")])
            frames = [msg.data async for msg in ws if msg.type == aiohttp.WSMsgType.BINARY]  # until the deadline
        assert json.loads(frames[-1][1:])["details"]["causes"][0]["message"] == "137"  # killed
        await wait_for(lambda: status("slow").get("phase") == "Failed")
        assert status("slow")["reason"] == "DeadlineExceeded"
        assert status("slow")["message"] == "Pod was active on the node longer than the specified deadline"

    scenario(test, isolation="none", missing_images={"nowhere/missing:1"})


def test_an_eviction_the_kubelet_writes_ends_the_pod_s_execs() -> None:
    async def test(cluster: FakeCluster) -> None:
        async with aiohttp.ClientSession(cluster.url) as http:
            async with http.post("/api/v1/namespaces/default/pods", json=pod("evicted")) as resp:
                assert resp.status < 300
            await wait_for(lambda: any(p["status"].get("phase") == "Running" for p in cluster.pods()))
            ws = await http.ws_connect("/api/v1/namespaces/default/pods/evicted/exec", protocols=[PROTOCOL], params=[
                ("command", "sleep"), ("command", "300"), ("stdout", "true")])
            await cluster.set_pod_status("default", "evicted", {"phase": "Failed", "reason": "Evicted",
                                                                 "message": "The node was low on resource: memory."})
            async with asyncio.timeout(30):  # not the 300 s the command asked for
                frames = [msg.data async for msg in ws if msg.type == aiohttp.WSMsgType.BINARY]
        assert json.loads(frames[-1][1:])["details"]["causes"][0]["message"] == "137"  # killed with its pod
        assert cluster.pods()[0]["status"]["reason"] == "Evicted"

    scenario(test, isolation="none")


def test_exec_faults_and_errors_show_on_the_wire() -> None:
    def connect(http: aiohttp.ClientSession, script: str, protocol: str = PROTOCOL) -> Any:
        return http.ws_connect("/api/v1/namespaces/default/pods/a/exec", protocols=[protocol], params=[
            ("command", "sh"), ("command", "-c"), ("command", script), ("stdout", "true"), ("stderr", "true")])

    async def exec_frames(http: aiohttp.ClientSession, script: str) -> tuple[list[bytes], bool]:
        """Frames received and whether the server ended with a close frame."""
        ws = await connect(http, script)
        frames = [msg.data async for msg in ws if msg.type == aiohttp.WSMsgType.BINARY]
        return frames, ws.close_code == aiohttp.WSCloseCode.OK

    async def test(cluster: FakeCluster) -> None:
        async with aiohttp.ClientSession(cluster.url) as http:
            async with http.post("/api/v1/namespaces/default/pods", json=pod("a")):
                pass
            await wait_for(lambda: cluster.pods()[0]["status"]["phase"] == "Running")
            async with http.get("/api/v1/namespaces/default/pods/nope/exec?command=true&stdout=true",
                                headers={"Sec-WebSocket-Protocol": PROTOCOL}) as resp:
                assert resp.status == 404 and (await resp.json())["reason"] == "NotFound"
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await connect(http, "true", protocol="v3.channel.k8s.io")
            assert refused.value.status == 400

            cluster.faults.reject_upgrades_429 = 1
            with pytest.raises(aiohttp.WSServerHandshakeError) as limited:
                await connect(http, "true")
            assert limited.value.status == 429 and limited.value.headers["Retry-After"] == "0"
            frames, clean = await exec_frames(http, "echo hello; exit 2")
            assert frames[0] == b"\x01hello\n" and clean
            status = json.loads(frames[-1][1:])
            assert frames[-1][:1] == b"\x03" and status["reason"] == "NonZeroExitCode"
            assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]

            cluster.faults.drop_after_bytes = 3
            frames, clean = await exec_frames(http, "echo hello")
            assert b"".join(f[1:] for f in frames if f[:1] == b"\x01") == b"hel"
            assert not clean and not any(f[:1] == b"\x03" for f in frames)

            cluster.faults.drop_after_bytes, cluster.faults.omit_status = None, True
            frames, clean = await exec_frames(http, "echo hello")
            assert frames == [b"\x01hello\n"] and clean

            cluster.faults.omit_status = False
            frames, _ = await exec_frames(http, "sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
            background = int(frames[0][1:])
            ws = await connect(http, "echo $$; exec sleep 300")
            foreground = int((await ws.receive_bytes())[1:])
            await ws.close()  # the client leaves: its command dies
            await wait_for(lambda: not is_alive(foreground))
            assert is_alive(background)
            async with http.delete("/api/v1/namespaces/default/pods/a"):
                pass  # the pod goes: what its commands left in the background dies with it
            await wait_for(lambda: not is_alive(background))
        assert cluster.api_calls()["EXEC pods/exec"] == 8

    scenario(test, isolation="none", faults=ExecFaults())


def test_watch_selects_by_field_and_ends_after_its_timeout() -> None:
    async def test(cluster: FakeCluster) -> None:
        async with aiohttp.ClientSession(cluster.url) as http:
            for name in ("a", "b"):
                async with http.post("/api/v1/namespaces/default/pods", json=pod(name)):
                    pass
            started = time.monotonic()
            async with http.get("/api/v1/namespaces/default/pods", params={
                    "watch": "true", "fieldSelector": "metadata.name=b", "timeoutSeconds": "1"}) as resp:
                events = [json.loads(line) for line in (await resp.read()).splitlines() if line.strip()]
            assert 0.9 < time.monotonic() - started < 3
            assert {e["object"]["metadata"]["name"] for e in events} == {"b"}
            assert [e["type"] for e in events][-1] == "MODIFIED"  # Running, after the initial ADDED
            async with http.get("/api/v1/namespaces/default/pods", params={"labelSelector": "a in (b"}) as resp:
                assert resp.status == 400

    scenario(test, isolation="none", start_delay=0.2)


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "openforgerl.testing.kube", "--port", "0", "--kubeconfig",
                             str(kubeconfig), "--isolation", "none"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        word, url = proc.stdout.readline().split()
        assert word == "ready" and url in kubeconfig.read_text()
        api = client(kubeconfig)
        assert api.list_namespaced_pod("default").items == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
