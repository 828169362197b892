"""Image references: only a registry on this machine is ever pulled from."""

from __future__ import annotations

import pytest

from openforgerl.containers.refs import ensure_local, is_loopback_registry, registry_host
from openforgerl.errors import EnvBuildError


@pytest.mark.parametrize("image, host", [
    ("127.0.0.1:5000/forge/task:1", "127.0.0.1"),
    ("localhost:5000/x@sha256:" + "a" * 64, "localhost"),
    ("localhost/x", "localhost"),
    ("[::1]:5000/x:1", "[::1]"),
    ("ubuntu:22.04", ""),
    ("openforgerl/base:bookworm", ""),
    ("docker.io/library/debian", "docker.io"),
    ("10.0.0.2:5000/x", "10.0.0.2"),
])
def test_registry_host(image: str, host: str):
    assert registry_host(image) == host


def test_only_loopback_registries_count_as_local():
    assert is_loopback_registry("127.0.0.1:5000/forge/task:1")
    assert is_loopback_registry("127.8.0.1:5000/forge/task:1")
    assert is_loopback_registry("localhost:5000/x@sha256:" + "a" * 64)
    assert is_loopback_registry("[::1]:5000/x:1")
    assert not is_loopback_registry("ubuntu:22.04")
    assert not is_loopback_registry("openforgerl/base:bookworm")
    assert not is_loopback_registry("docker.io/library/debian")
    assert not is_loopback_registry("10.0.0.2:5000/x")


class _Images:
    def __init__(self, present: set[str]) -> None:
        self.present, self.pulled = present, []

    def get(self, image: str):
        import docker.errors

        if image not in self.present:
            raise docker.errors.ImageNotFound(image)
        return image

    def pull(self, image: str):
        self.pulled.append(image)
        self.present.add(image)


class _Client:
    def __init__(self, present: set[str]) -> None:
        self.images = _Images(present)


def test_ensure_local_never_pulls_from_a_public_registry():
    client = _Client(set())
    with pytest.raises(EnvBuildError, match="would be pulled from a public registry") as raised:
        ensure_local(client, "debian:12", EnvBuildError, fix="push it to the local registry")
    assert raised.value.fix == "push it to the local registry"
    assert client.images.pulled == []


def test_ensure_local_pulls_from_loopback_and_reports_it():
    client = _Client({"present:1"})
    assert ensure_local(client, "present:1", EnvBuildError, fix="-") is False
    assert ensure_local(client, "127.0.0.1:5000/t@sha256:" + "b" * 64, EnvBuildError, fix="-") is True
    assert client.images.pulled == ["127.0.0.1:5000/t@sha256:" + "b" * 64]


def test_an_engine_that_cannot_make_the_sandbox_network_names_network_host_as_the_unsafe_way_out():
    import docker.errors

    from openforgerl.containers.network import SPECS, _create
    from openforgerl.errors import SandboxError

    class Networks:
        def create(self, *args, **kwargs):
            raise docker.errors.APIError("internal networks are not supported by this driver")

        def get(self, name):
            raise docker.errors.NotFound(name)

    class Client:
        networks = Networks()

    with pytest.raises(SandboxError, match="cannot create the openforgerl-isolated network") as raised:
        _create(Client(), SPECS["isolated"])
    assert "network=host" in (raised.value.fix or "") and "unsafe" in (raised.value.fix or "")


def test_an_existing_network_with_other_settings_is_refused_not_used():
    from openforgerl.containers.network import SPECS, _check
    from openforgerl.errors import UserError

    attrs = {"Internal": False, "Options": {"com.docker.network.bridge.enable_icc": "true"}}
    with pytest.raises(UserError, match="exists with other settings") as raised:
        _check(attrs, SPECS["isolated"])
    assert "docker network rm openforgerl-isolated" in (raised.value.fix or "")
