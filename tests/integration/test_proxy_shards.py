"""A sharded proxy (``forge proxy --workers N``, ``proxy.workers``): each shard a process of its own.

What a user relies on: rollouts spread over the shards; a harness gets its own shard's URL and a token
sent to another shard is a 4xx naming the right one; kill -9 of one shard loses nothing it answered,
the others keep serving meanwhile, and it comes back with its rollouts; the admin token is never
written to disk; a rollout run on Docker with a sharded in-run proxy records every rollout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from openforgerl.rollout.proxy.engine import ScriptedEngineConfig
from openforgerl.rollout.proxy_handle import ProxySettings, open_proxy
from openforgerl.testing.ports import consecutive_ports
from openforgerl.testing.proxy import policy_template

ADMIN = "shards-admin-token"
AUTH = {"authorization": f"Bearer {ADMIN}"}
FIRST = [{"role": "user", "content": "hi"}]
SECOND = [*FIRST, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    policy_template().tokenizer.save_pretrained(str(directory))
    return directory


def call(url: str, token: str, messages: list[dict]) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "smollm2", "messages": messages}, timeout=30)


@pytest.fixture
def sharded(tmp_path: Path, tokenizer_dir: Path):
    port, data = consecutive_ports(3), tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--port", str(port),
         "--admin-token", ADMIN, "--data-dir", str(data), "--tokenizer", str(tokenizer_dir), "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        raise AssertionError("the sharded proxy did not become healthy in 180 s")
    try:
        yield url, data, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_rollouts_spread_over_shards_and_a_token_at_the_wrong_shard_is_told_where_to_go(sharded):
    url, data, proc = sharded
    health = httpx.get(url + "/health").json()
    assert health["workers"] == 2 and [s["shard"] for s in health["shards"]] == [0, 1]
    created = [httpx.post(url + "/rollouts", headers=AUTH, json={"metadata": {"i": i}}).json() for i in range(4)]
    assert sorted(r["shard"] for r in created) == [0, 0, 1, 1]  # least loaded first
    assert len({r["base_url"] for r in created}) == 2 and url not in {r["base_url"] for r in created}
    for rollout in created:
        assert call(rollout["base_url"], rollout["token"], FIRST).status_code == 200
    on_one = next(r for r in created if r["shard"] == 1)
    wrong = next(r["base_url"] for r in created if r["shard"] == 0)
    answer = call(wrong, on_one["token"], FIRST)
    assert answer.status_code == 421 and on_one["base_url"] in answer.json()["error"]["message"]
    front = call(url, on_one["token"], FIRST)  # the admin front serves no model calls: it names the shard
    assert front.status_code == 421 and on_one["base_url"] in front.json()["error"]["message"]
    assert call(on_one["base_url"], "fr-not-a-token", FIRST).status_code == 401
    for rollout in created:
        finished = httpx.post(url + f"/rollouts/{rollout['id']}/finish", headers=AUTH, json={"reward": 1.0})
        assert finished.status_code == 200 and finished.json()["reward"] == 1.0
        trajectory = httpx.get(url + f"/rollouts/{rollout['id']}/trajectory", headers=AUTH).json()
        assert trajectory["metadata"]["i"] == created.index(rollout) and len(trajectory["calls"]) == 1
    assert len(httpx.get(url + "/rollouts", headers=AUTH).json()["rollouts"]) == 4
    assert httpx.post(url + "/rollouts", json={}).status_code == 401  # the front checks the admin token
    assert len(list((data / "shard-0" / "rollouts").glob("*.log"))) == 2
    assert len(list((data / "shard-1" / "rollouts").glob("*.log"))) == 2
    on_disk = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
    assert ADMIN.encode() not in on_disk  # shards get their config on a pipe


def test_kill_9_of_one_shard_keeps_the_others_serving_and_it_recovers_its_rollouts(sharded):
    url, data, proc = sharded
    created = [httpx.post(url + "/rollouts", headers=AUTH, json={}).json() for _ in range(2)]
    by_shard = {r["shard"]: r for r in created}
    for rollout in created:
        assert call(rollout["base_url"], rollout["token"], FIRST).status_code == 200
    victim = json.loads((data / "shard-1.ready").read_text())["pid"]
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.3)
    assert call(by_shard[0]["base_url"], by_shard[0]["token"], SECOND).status_code == 200  # meanwhile
    assert httpx.get(url + "/health").status_code == 503  # degraded while shard 1 restarts
    deadline = time.monotonic() + 120
    while True:
        try:
            answer = call(by_shard[1]["base_url"], by_shard[1]["token"], SECOND)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "shard 1 did not come back in 120 s"
            time.sleep(0.3)
    assert answer.status_code == 200  # same port, same token: its rollout was recovered from its log
    trajectory = httpx.get(url + f"/rollouts/{by_shard[1]['id']}/trajectory", headers=AUTH).json()
    assert [c["status"] for c in trajectory["calls"]] == ["ok", "ok"]
    assert len(trajectory["segments"]) == 1  # the second call extended the first, across the restart
    assert json.loads((data / "shard-1.ready").read_text())["pid"] != victim
    assert httpx.get(url + "/health").json()["status"] == "ok"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=40) == 0


def test_an_in_run_proxy_with_workers_routes_each_rollout_to_its_shard(tmp_path: Path, tokenizer_dir: Path):
    settings = ProxySettings(engine=ScriptedEngineConfig(), tokenizer=str(tokenizer_dir), workers=2)

    async def run() -> None:
        async with open_proxy(settings, "smollm2", tmp_path / "proxy") as handle:
            assert len(handle.shards) == 2
            created = [await handle.create({"i": i}) for i in range(4)]
            assert handle.live == [2, 2]
            urls = {handle.model_url(handle.url_for("127.0.0.1"), rid) for rid, _ in created}
            assert urls == {shard["base_url"] for shard in handle.shards}
            async with httpx.AsyncClient() as client:
                for rid, token in created:
                    answer = await client.post(handle.model_url(handle.url_for("127.0.0.1"), rid)
                                               + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                                               json={"messages": FIRST})
                    assert answer.status_code == 200
            for rid, _ in created:
                await handle.finish(rid, 0.0, "failure", {})
                assert len((await handle.trajectory(rid))["calls"]) == 1
            assert handle.live == [0, 0]
    asyncio.run(run())
    assert sorted(p.name for p in (tmp_path / "proxy").glob("shard-*") if p.is_dir()) == ["shard-0", "shard-1"]


def standalone_proxy(tmp_path: Path, tokenizer_dir: Path, name: str) -> tuple[str, subprocess.Popen]:
    port = consecutive_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "openforgerl", "proxy", "--engine", "scripted", "--port", str(port),
         "--admin-token", ADMIN, "--data-dir", str(tmp_path / name), "--tokenizer", str(tokenizer_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    return f"http://127.0.0.1:{port}", proc


def test_independent_proxies_as_shards_of_one_run_each_own_the_rollouts_created_on_them(tmp_path: Path,
                                                                                      tokenizer_dir: Path):
    """Kubernetes replicas (forge k8s proxy --replicas N) or a proxy per node: separate proxies that share
    only the admin token; the run's proxy.shards spreads its rollouts and routes each one's calls, finish
    and trajectory to the proxy that owns it. A shard that does not answer fails the run's pre-flight."""
    from openforgerl.errors import ProviderError
    from openforgerl.rollout.proxy_handle import check_engine

    started = [standalone_proxy(tmp_path, tokenizer_dir, f"node-{i}") for i in range(2)]
    try:
        for url, proc in started:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, f"{url} did not become healthy in 180 s"
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
        settings = ProxySettings(shards=[{"url": url} for url, _ in started], admin_token=ADMIN)

        async def run() -> None:
            await check_engine(settings)
            async with open_proxy(settings, "smollm2", tmp_path / "unused") as handle:
                created = [await handle.create({"i": i}) for i in range(4)]
                assert handle.live == [2, 2]
                routes = [handle.model_url(handle.url_for("127.0.0.1"), rid) for rid, _ in created]
                assert sorted(routes) == sorted(url for url, _ in started for _ in range(2))
                async with httpx.AsyncClient() as client:
                    for (rid, token), route in zip(created, routes, strict=True):
                        answer = await client.post(route + "/v1/chat/completions", json={"messages": FIRST},
                                                   headers={"authorization": f"Bearer {token}"})
                        assert answer.status_code == 200
                        wrong = next(url for url, _ in started if url != route)  # not this proxy's rollout
                        refused = await client.post(wrong + "/v1/chat/completions", json={"messages": FIRST},
                                                    headers={"authorization": f"Bearer {token}"})
                        assert refused.status_code == 401
                for i, (rid, _) in enumerate(created):
                    await handle.finish(rid, 1.0, "success", {})
                    trajectory = await handle.trajectory(rid)
                    assert trajectory["metadata"]["i"] == i and len(trajectory["calls"]) == 1
                assert handle.live == [0, 0]
        asyncio.run(run())
        assert [len(list((tmp_path / f"node-{i}" / "rollouts").glob("*.log"))) for i in range(2)] == [2, 2]
        started[1][1].send_signal(signal.SIGTERM)
        started[1][1].wait(timeout=40)
        with pytest.raises(ProviderError, match=f"the proxy shard at {started[1][0]} does not answer"):
            asyncio.run(check_engine(settings))
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=40)


def test_shards_stop_when_the_process_that_started_them_is_killed(sharded):
    url, data, proc = sharded
    pids = [json.loads((data / f"shard-{i}.ready").read_text())["pid"] for i in range(2)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()
              for pid in pids):
        assert time.monotonic() < deadline, "shards outlived the killed proxy by 30 s"
        time.sleep(0.2)
