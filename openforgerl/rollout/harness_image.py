"""Harness image layers: a task image plus one harness's tools, built once and cached.

Harness CLIs are never baked into task images: ``harness_image(task_image, tool)`` commits a layer
holding ``tools_dir()/<tool>`` and its launcher at ``/opt/forge/tools`` on top of the task image and
tags it by (layer format, task image id, tool, install fingerprint), so each pair is built once and every later
rollout reuses it. Every file in it is root's and writable by root alone, whoever installed the harness.
The layer in use supersedes the same tool's other layers on the same task image (another install, an
edited agent, an older layer format): the first rollout of the pair in a process removes them, unless a
container still uses them.
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
from openforgerl.log import get_logger
from openforgerl.paths import tools_dir
from openforgerl.rollout.harness import TOOLS_MOUNT
from openforgerl.rollout.harnesses.install import get_package, installed

LAYER_REPO = "openforgerl/harness"
LABEL_LAYER = "openforgerl.harness-layer"
LABEL_BASE = "openforgerl.harness-base"
log = get_logger(__name__)
_tidied: set[tuple[str, str]] = set()
"""(task image id, tool) pairs whose superseded layers this process has removed."""


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
    if (base.id, tool) not in _tidied:  # once per process: two forges with different installs do not take turns
        _tidied.add((base.id, tool))
        remove_superseded(client, base.id, tool, keep=tag)
    return tag


def remove_superseded(client: Any, base_id: str, tool: str, keep: str) -> list[str]:
    """Remove ``tool``'s layers on ``base_id`` other than ``keep``; returns the tags removed.

    A layer's base is its label (older layers have none: then the image's parent, which Docker's classic
    image store records for a commit). A layer a container still uses stays, for a later process."""
    removed: list[str] = []
    try:
        images = client.api.images(filters={"label": f"{LABEL_LAYER}={tool}"})  # summaries: no inspect each
    except docker.errors.APIError as exc:  # tidying is best effort: the rollout goes on
        log.warning("could not list %s layers to remove superseded ones: %s", tool, exc.explanation or exc)
        return removed
    for image in images:
        tags = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
        if (image.get("Labels") or {}).get(LABEL_BASE, image.get("ParentId")) != base_id or keep in tags:
            continue
        for tag in tags:
            try:
                client.images.remove(tag)
            except docker.errors.ImageNotFound:
                continue  # removed by another forge meanwhile
            except docker.errors.APIError as exc:  # in use by a container (or being removed)
                log.debug("keeping superseded layer %s: %s", tag, exc.explanation or exc)
                break
            removed.append(tag)
    if removed:
        log.info("removed %d superseded %s layer(s) on %s: %s", len(removed), tool, base_id[:19], ", ".join(removed))
    return removed


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
        container.commit(repository=repo, tag=version, changes=[f"LABEL {LABEL_LAYER}={tool}",
                                                                   f"LABEL {LABEL_BASE}={base_id}"])
    except docker.errors.APIError as exc:
        raise SandboxError(f"building the {tool} layer on {base_id[:19]} failed: {exc.explanation or exc}") from exc
    finally:
        container.remove(force=True)
