"""Harness image layers: a task image plus one harness's tools, built once and cached.

Harness CLIs are never baked into task images: ``harness_image(task_image, tool)`` commits a layer
holding ``tools_dir()/<tool>`` and its launcher at ``/opt/forge/tools`` on top of the task image and
tags it by (layer format, task image id, tool, install fingerprint), so each pair is built once and every later
rollout reuses it. Every file in it is root's and writable by root alone, whoever installed the harness.
Invariant: the tag names exactly what is inside it.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import docker.errors

from openforgerl.containers.archives import dirs_archive, owned_by_root
from openforgerl.containers.images import build_once, image_exists
from openforgerl.errors import SandboxError
from openforgerl.paths import tools_dir
from openforgerl.rollout.harness import TOOLS_MOUNT
from openforgerl.rollout.harnesses.install import get_package, installed

LAYER_REPO = "openforgerl/harness"
LABEL_LAYER = "openforgerl.harness-layer"


LAYER_FORMAT = 2
"""Changes when a layer of the same tools holds something else: 2, every file root's (was the installer's)."""


def layer_tag(task_image_id: str, tool: str, fingerprint: str) -> str:
    key = hashlib.sha256(f"{LAYER_FORMAT}\0{task_image_id}\0{tool}\0{fingerprint}".encode()).hexdigest()[:16]
    return f"{LAYER_REPO}:{tool}-{key}"


def harness_image(client: Any, task_image: str, tool: str | None, root: Path | None = None) -> str:
    """The image a rollout of ``tool`` on ``task_image`` runs in (built on first use)."""
    if tool is None:
        return task_image
    root = root or tools_dir()
    record = installed(root).get(tool)
    if record is None:
        raise SandboxError(f"harness {tool!r} is not installed", fix=f"forge harness install {tool}")
    try:
        base = client.images.get(task_image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"image {task_image} not found", fix="build it (forge build-env)") from exc
    tag = layer_tag(base.id, tool, record.layer_key)
    build_once(tag, lambda: image_exists(client, tag), lambda: _build(client, base.id, tool, root, tag))
    return tag


def _build(client: Any, base_id: str, tool: str, root: Path, tag: str) -> None:
    spec = get_package(tool)
    container = client.containers.create(base_id, ["true"], labels={LABEL_LAYER: tool}, network_mode="none")
    try:
        with tempfile.TemporaryFile(prefix="forge-layer-") as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                tar.add(str(root / tool), arcname=tool, filter=owned_by_root)
                tar.add(str(root / "bin" / spec.bin), arcname=f"bin/{spec.bin}", filter=owned_by_root)
            archive.seek(0)
            client.api.put_archive(container.id, "/", dirs_archive(TOOLS_MOUNT))
            if not client.api.put_archive(container.id, TOOLS_MOUNT, archive):
                raise SandboxError(f"copying {tool} into the harness layer failed")
        repo, _, version = tag.partition(":")
        container.commit(repository=repo, tag=version, changes=[f"LABEL {LABEL_LAYER}={tool}"])
    except docker.errors.APIError as exc:
        raise SandboxError(f"building the {tool} layer on {base_id[:19]} failed: {exc.explanation or exc}") from exc
    finally:
        container.remove(force=True)
