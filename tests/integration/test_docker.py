"""The real local stack: Docker engine, base image, registry — made ready exactly as forge stack up does.

Uses the machine's forge home (the base image's rootfs cache makes reruns fast) and leaves the
services running, as ``forge stack up`` would. Every container uses host networking.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid

import docker
import httpx
import pytest

from openforgerl.containers.client import docker_client
from openforgerl.stack.apt import is_root
from openforgerl.stack.base_image import AGENT_UID, AGENT_USER, IMAGE, KEY_LABEL, recipe_key
from openforgerl.stack.docker_engine import DockerEnginePart
from openforgerl.stack.parts import STACK_UP, default_parts
from openforgerl.stack.registry import registry_address

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    engine = DockerEnginePart().check()
    if not engine.ready and not is_root():
        pytest.skip(f"not root and {engine.detail}: nothing here can start an engine")
    for part in default_parts(STACK_UP):
        part.ensure(lambda action: print(f"{action.did}\n  undo: {action.undo}"))
    return docker_client()


def forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "COLUMNS": "300"})


def test_engine_answers(client):
    assert client.ping()
    assert client.version()["ApiVersion"]


def test_base_image_exists_and_matches_the_recipe(client):
    image = client.images.get(IMAGE)
    assert image.labels[KEY_LABEL] == recipe_key()
    assert image.attrs["Config"]["Cmd"] == ["/bin/bash"]


def test_container_runs_a_command_as_the_non_root_agent_user(client):
    out = client.containers.run(IMAGE, ["sh", "-c", "id -u; id -un; echo $HOME; python3 -c 'print(6 * 7)'"],
                                user=f"{AGENT_UID}:{AGENT_UID}", network_mode="host", remove=True)
    assert out.decode().split() == [str(AGENT_UID), AGENT_USER, f"/home/{AGENT_USER}", "42"]


def test_stack_up_again_changes_nothing(client):
    again = []
    for part in default_parts(STACK_UP):
        assert part.ensure(again.append).ready
    assert again == []
    result = forge("stack", "up")
    assert result.returncode == 0, result.stderr
    assert "nothing changed" in result.stdout and "undo:" not in result.stdout


def test_doctor_shows_the_stack_parts_ready(client):
    result = forge("doctor")
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") > 3}
    for name in STACK_UP:
        assert "│ ready" in rows[name], result.stdout


def tiny_image_tar(payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def read_file_from_image(client: docker.DockerClient, ref: str, path: str) -> bytes:
    container = client.containers.create(ref, command=["/none"], network_mode="host")
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(tar.getmembers()[0]).read()
    finally:
        container.remove(force=True)


def test_registry_push_then_pull_by_digest(client):
    payload = uuid.uuid4().hex.encode()
    repository, tag = f"{registry_address()}/forge-test/tiny", uuid.uuid4().hex[:12]
    client.api.import_image_from_data(tiny_image_tar(payload), repository=repository, tag=tag)
    pushed = client.images.get(f"{repository}:{tag}")
    events = list(client.images.push(repository, tag=tag, stream=True, decode=True))
    assert not [e for e in events if "error" in e], events
    digest = next(e["aux"]["Digest"] for e in events if "Digest" in e.get("aux", {}))
    client.images.remove(pushed.id, force=True)
    try:
        pulled = client.images.pull(f"{repository}@{digest}")
        assert pulled.id == pushed.id
        assert read_file_from_image(client, f"{repository}@{digest}", "/hello.txt") == payload
    finally:
        client.images.remove(pushed.id, force=True)
        name = repository.split("/", 1)[1]
        with httpx.Client(trust_env=False, timeout=10) as http:
            http.delete(f"http://{registry_address()}/v2/{name}/manifests/{digest}")
