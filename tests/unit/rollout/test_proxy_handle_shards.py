"""The admin client's view of a sharded proxy: which shard a rollout goes to, which URL its harness gets."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from openforgerl.errors import ProxyError
from openforgerl.rollout.proxy_handle import ProxyHandle

SHARDS = [{"base_url": "http://127.0.0.1:9101", "model_urls": {"172.30.0.1": "http://172.30.0.1:9201"}},
          {"base_url": "http://127.0.0.1:9102", "model_urls": {"172.30.0.1": "http://172.30.0.1:9202"}}]


def fake_shards() -> tuple[httpx.MockTransport, list[str]]:
    """Each shard answers its admin routes; ``seen`` lists the shard port each request went to."""
    seen: list[str] = []
    ids = itertools.count()

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.port} {request.url.path}")
        if request.url.path == "/rollouts":
            return httpx.Response(200, json={"id": f"r-{next(ids)}", "token": f"fr-s{request.url.port - 9101}-x"})
        if request.url.path.endswith("/finish"):
            return httpx.Response(200, json={"calls": 0})
        return httpx.Response(200, json={"calls": [], "port": request.url.port})
    return httpx.MockTransport(answer), seen


def test_rollouts_go_to_the_least_loaded_shard_and_stay_with_it():
    transport, seen = fake_shards()
    handle = ProxyHandle(SHARDS[0]["base_url"], "admin-token", transport=transport, shards=SHARDS)

    async def run() -> None:
        created = [await handle.create({}) for _ in range(3)]
        assert handle.live == [2, 1]
        assert [handle.model_url("http://127.0.0.1:9101", rid) for rid, _ in created] == [
            "http://127.0.0.1:9101", "http://127.0.0.1:9102", "http://127.0.0.1:9101"]
        assert handle.model_url("http://172.30.0.1:9201", created[1][0]) == "http://172.30.0.1:9202"
        await handle.finish(created[0][0], 1.0, "success", {})
        await handle.finish(created[0][0], 1.0, "success", {})  # a retried finish is counted once
        assert handle.live == [1, 1]
        trajectory = await handle.trajectory(created[1][0])  # after its finish too: the owner is still known
        assert trajectory["port"] == 9102
        await handle.create({})
        assert handle.live == [2, 1] or handle.live == [1, 2]
        await handle.close()
    asyncio.run(run())
    assert "POST 9102 /rollouts" in seen


def test_every_shard_s_listener_is_listed_for_a_sandbox_address_and_an_unknown_one_is_refused():
    handle = ProxyHandle(SHARDS[0]["base_url"], "admin-token", shards=SHARDS)
    assert handle.urls_for("172.30.0.1") == ["http://172.30.0.1:9201", "http://172.30.0.1:9202"]
    assert handle.urls_for("127.0.0.1") == ["http://127.0.0.1:9101", "http://127.0.0.1:9102"]
    with pytest.raises(ProxyError, match="no listener for sandboxes at 10.9.9.9"):
        handle.urls_for("10.9.9.9")


def test_a_listener_added_after_the_handle_was_made_is_found():
    """The veRL agent loop adds its sandbox listener to ``sandbox_urls`` once it knows the address."""
    handle = ProxyHandle("http://127.0.0.1:9101", "admin-token")
    handle.sandbox_urls["172.30.0.1"] = "http://172.30.0.1:9201"
    assert handle.url_for("172.30.0.1") == "http://172.30.0.1:9201"
    assert handle.model_url("http://172.30.0.1:9201", "r-any") == "http://172.30.0.1:9201"


def test_proxy_shards_in_a_run_config_name_the_first_shard_and_a_conflicting_url_is_one_clear_error():
    from pydantic import ValidationError

    from openforgerl.rollout.proxy_handle import ProxySettings

    shards = [{"url": "http://forge-proxy-0.p.svc:8080", "sandbox_url": "http://forge-proxy-0.p.svc:8081"},
              {"url": "http://forge-proxy-1.p.svc:8080", "sandbox_url": "http://forge-proxy-1.p.svc:8081"}]
    settings = ProxySettings.model_validate({"shards": shards, "admin_token": "t"})
    assert (settings.url, settings.sandbox_url) == (shards[0]["url"], shards[0]["sandbox_url"])
    again = ProxySettings.model_validate(settings.model_dump())  # a saved run config loads back
    assert [s.url for s in again.shards] == [s["url"] for s in shards]
    with pytest.raises(ValidationError, match=r"proxy.url is 'http://elsewhere:8080' but proxy.shards\[0\].url"):
        ProxySettings.model_validate({"shards": shards, "url": "http://elsewhere:8080"})


def test_pods_reaching_the_proxy_by_its_service_name_get_their_own_replica_s_model_url(tmp_path):
    """On Kubernetes, sandboxes reach "the proxy" at one name (the runtime's reach address); with replicas,
    each rollout's harness must get the model API of the replica that owns it."""
    from openforgerl.rollout.proxy_handle import ProxySettings, open_proxy

    shards = [{"url": f"http://forge-proxy-{i}.forge-proxy.forge.svc:8080",
               "sandbox_url": f"http://forge-proxy-{i}.forge-proxy.forge.svc:8081"} for i in range(2)]
    settings = ProxySettings(shards=shards, admin_token="t")

    async def run() -> None:
        async with open_proxy(settings, "smollm2", tmp_path, sandbox_hosts=["forge-proxy.forge.svc"]) as handle:
            assert handle.urls_for("forge-proxy.forge.svc") == [s["sandbox_url"] for s in shards]
            first = handle.url_for("forge-proxy.forge.svc")
            handle.load.own("r-on-1", 1)
            assert handle.model_url(first, "r-on-1") == shards[1]["sandbox_url"]
            assert handle.model_url(first, "r-unknown") == shards[0]["sandbox_url"]
        one = ProxySettings(url="http://127.0.0.1:8080", sandbox_url="http://forge-proxy.forge.svc:8081",
                            admin_token="t")  # one replica (a name, not an address: was a ValueError)
        async with open_proxy(one, "smollm2", tmp_path, sandbox_hosts=["forge-proxy.forge.svc"]) as handle:
            assert handle.url_for("forge-proxy.forge.svc") == "http://forge-proxy.forge.svc:8081"
    asyncio.run(run())
