"""Fixtures for tests that use real parts: one vLLM server for the whole session."""

from __future__ import annotations

import subprocess
import sys

import pytest


def forge_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def vllm_base_url():
    """vLLM serving SmolLM2 through the real `forge serve` (reused when already running, then left as found)."""
    from openforgerl.serving import vllm

    pulled = forge_cli("model", "pull", "smollm2")
    assert pulled.returncode == 0, pulled.stderr
    already = vllm.running_server() is not None
    started = forge_cli("serve", "--model", "smollm2")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    yield url
    if not already:
        forge_cli("serve", "--stop")


@pytest.fixture(scope="session")
def build_cached():
    """build(context_dir, tag) -> tag: a docker build, skipped when the tag was built from the same bytes."""
    import docker.errors

    from openforgerl.containers.client import docker_client
    from openforgerl.containers.images import environment_hash

    client = docker_client()

    def build(context, tag: str) -> str:
        key = environment_hash(context)
        try:
            if client.images.get(tag).labels.get("openforgerl.test-context") == key:
                return tag
        except docker.errors.ImageNotFound:
            pass
        client.images.build(path=str(context), tag=tag, network_mode="host", rm=True, forcerm=True, pull=False,
                            labels={"openforgerl.test-context": key})
        return tag

    return build
