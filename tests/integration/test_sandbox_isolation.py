"""Sandbox isolation on a real Docker engine: what a rollout container can and cannot reach.

Probes go only to loopback, to addresses of the sandbox network forge created, and to servers this
test starts itself; never to any address outside this machine (routes are inspected instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from openforgerl.rollout.proxy.engine import ScriptedEngineConfig
from openforgerl.rollout.proxy_handle import ProxySettings, open_proxy
from openforgerl.rollout.runtime import LABEL_RUN, SandboxSpec
from openforgerl.rollout.runtimes.docker import DockerRuntime
from openforgerl.stack.registry import registry_port

pytestmark = pytest.mark.docker
BASE = "openforgerl/base:bookworm"

PROBE = r"""
import json, os, socket, sys, urllib.request, urllib.error
def connects(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return repr(exc)
targets = json.loads(sys.argv[1])
out = {name: connects(host, port) for name, (host, port) in targets["tcp"].items()}
out.update({name: get(url) for name, url in targets["http"].items()})
routes = open("/proc/net/route").read().splitlines()[1:]
out["default_route"] = any(line.split()[1] == "00000000" for line in routes)
out["docker_socket"] = os.path.exists("/var/run/docker.sock")
print(json.dumps(out))
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def host_server_on_all_addresses():
    """A service of this host listening on 0.0.0.0, as sshd or a dev server would."""
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def spec(**kw) -> SandboxSpec:
    return SandboxSpec(image=BASE, labels={LABEL_RUN: "pytest-isolation"}, **kw)


def test_an_isolated_sandbox_reaches_the_model_api_and_nothing_else(tmp_path: Path):
    async def go():
        runtime = DockerRuntime()
        reach = (await runtime.reach({"isolated"}))["isolated"]
        gateway = reach.address
        settings = ProxySettings(engine=ScriptedEngineConfig())
        with host_server_on_all_addresses() as host_port:
            async with open_proxy(settings, "smollm2", tmp_path / "proxy", [gateway]) as proxy:
                model_url = proxy.url_for(gateway)
                admin_port = int(proxy.base_url.rsplit(":", 1)[1])
                with reach.expose(int(model_url.rsplit(":", 1)[1])):
                    async with runtime.sandbox(spec()) as other, runtime.sandbox(spec()) as box:
                        other.container.reload()
                        other_ip = other.container.attrs["NetworkSettings"]["Networks"]["openforgerl-isolated"][
                            "IPAddress"]
                        await other.exec(["sh", "-c", "setsid python3 -m http.server 8080 >/dev/null 2>&1 &"])
                        await asyncio.sleep(1)
                        targets = {"tcp": {"registry": [gateway, registry_port()], "vllm": [gateway, 8000],
                                           "admin_port": [gateway, admin_port], "host_service": [gateway, host_port],
                                           "own_loopback_registry": ["127.0.0.1", registry_port()],
                                           "other_sandbox": [other_ip, 8080],
                                           "model_api": [gateway, int(model_url.rsplit(":", 1)[1])]},
                                   "http": {"models": f"{model_url}/v1/models", "admin": f"{model_url}/rollouts",
                                            "health": f"{model_url}/health"}}
                        probe = await box.exec(["python3", "-c", PROBE, json.dumps(targets)], user="agent", timeout=120)
                        host_netns = os.readlink("/proc/self/ns/net")
                        box_netns = os.readlink(f"/proc/{box.host.init_pid}/ns/net")
            return json.loads(probe.stdout), host_netns, box_netns

    seen, host_netns, box_netns = asyncio.run(go())
    assert seen["model_api"] is True and seen["models"] == 200
    assert seen["admin"] == 404 and seen["health"] == 404  # the sandbox listener has no admin routes at all
    for unreachable in ("registry", "vllm", "admin_port", "host_service", "own_loopback_registry", "other_sandbox"):
        assert seen[unreachable] is False, unreachable
    assert seen["default_route"] is False and seen["docker_socket"] is False
    assert host_netns != box_netns  # binding 0.0.0.0 inside binds the sandbox's own interfaces only


def test_a_port_no_run_opened_is_closed_again_and_a_dead_run_s_opening_is_swept():
    from openforgerl.containers.network import SPECS, chain_name, ensure_chain

    bridge = SPECS["isolated"].bridge
    ensure_chain(bridge)
    rules = __import__("subprocess").run(["iptables", "-S", chain_name(bridge)], capture_output=True, text=True)
    assert "-j REJECT" in rules.stdout.rstrip().splitlines()[-1]  # everything not opened is refused
    # a rule left by an owner that died (pid far above pid_max) goes at the next ensure
    import subprocess

    subprocess.run(["iptables", "-I", chain_name(bridge), "-p", "tcp", "--dport", "1", "-m", "comment", "--comment",
                    "forge-pid-999999999", "-j", "ACCEPT"], check=True)
    from openforgerl.containers.network import sweep_rules

    assert sweep_rules(bridge) == 1
    assert "forge-pid-999999999" not in subprocess.run(["iptables", "-S", chain_name(bridge)], capture_output=True,
                                                       text=True).stdout


def test_network_none_and_host_modes():
    async def go():
        runtime = DockerRuntime()
        async with runtime.sandbox(spec(network="none")) as none, runtime.sandbox(spec(network="host")) as host:
            none_routes = (await none.exec(["cat", "/proc/net/route"])).stdout
            host.container.reload()
            return none_routes, host.container.attrs["HostConfig"]["NetworkMode"]

    none_routes, host_mode = asyncio.run(go())
    assert len(none_routes.strip().splitlines()) == 1  # header only: no interface but loopback
    assert host_mode == "host"


def test_forge_proxy_sandbox_serves_the_model_api_on_the_sandbox_network(tmp_path: Path):
    import subprocess
    import sys
    import time

    import httpx

    port = 18231
    proxy = subprocess.Popen([sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--port", str(port),
                              "--admin-token", "admin-token-1234", "--data-dir", str(tmp_path / "data"), "--sandbox"],
                             stderr=subprocess.PIPE, text=True)
    try:
        url = ""
        for line in proxy.stderr:
            if line.startswith("sandbox model API:"):
                url = line.split()[3]
                break
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)

        async def probe() -> str:
            async with DockerRuntime().sandbox(spec()) as box:
                targets = {"tcp": {}, "http": {"models": f"{url}/v1/models", "admin": f"{url}/rollouts"}}
                return (await box.exec(["python3", "-c", PROBE, json.dumps(targets)], user="agent", timeout=60)).stdout

        seen = json.loads(asyncio.run(probe()))
        admin = httpx.get(f"http://127.0.0.1:{port}/rollouts", headers={"authorization": "Bearer admin-token-1234"})
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
    assert url.startswith("http://") and seen["models"] == 200 and seen["admin"] == 404
    assert admin.status_code == 200  # the admin API: on loopback only
    rules = subprocess.run(["iptables", "-S", "FORGE-ISO0"], capture_output=True, text=True).stdout
    assert f"--dport {url.rsplit(':', 1)[1]} " not in rules  # the opening closed with the proxy
