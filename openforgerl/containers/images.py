"""Task images: build a task's environment/ with the docker SDK, once per distinct content.

Invariant: the tag is derived from the bytes of environment/ (every file's path, mode and content),
so identical environments share one image and any change builds a new one. Builds never pull:
a FROM that is not already local fails with the fix (``forge stack up`` builds the base image).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from openforgerl.containers.refs import ensure_local
from openforgerl.errors import EnvBuildError
from openforgerl.tasks import Task

TASK_REPO = "openforgerl/task"
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def build_once(key: str, exists: Callable[[], bool], build: Callable[[], object]) -> bool:
    """Run ``build`` unless ``exists()``; threads asking for the same ``key`` wait for one build.

    Returns whether this call built. Keys name content (an image tag derived from its inputs), so a
    second build of the same key would only redo identical work."""
    with _guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if exists():
            return False
        build()
        return True


def image_exists(client: Any, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def environment_hash(env_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in env_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(env_dir)).encode() + b"\0")
        digest.update(oct(path.stat().st_mode & 0o777).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def task_image_tag(task: Task) -> str:
    return f"{TASK_REPO}:{environment_hash(task.path / 'environment')}"


def ensure_task_image(client: Any, task: Task) -> tuple[str, bool]:
    """The image a task runs in and whether this call built it: its pinned ``docker_image`` as is, or
    environment/ built once per content hash."""
    if task.config.environment.docker_image:
        return task.config.environment.docker_image, False
    tag = task_image_tag(task)
    built = build_once(tag, lambda: image_exists(client, tag),
                       lambda: build_image(client, task.path / "environment", tag,
                                           timeout=task.config.environment.build_timeout_sec))
    return tag, built


def base_images(dockerfile: str) -> list[str]:
    """Images named by FROM lines, minus references to earlier build stages."""
    images, stages = [], set()
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if args and args[0].lower() not in stages:
            images.append(args[0])
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
    return images


def check_bases_local(client: Any, dockerfile: Path) -> None:
    """Docker would silently pull a missing FROM image from a public registry; refuse instead."""
    for image in base_images(dockerfile.read_text()):
        if image != "scratch":
            ensure_local(client, image, EnvBuildError,
                         fix=f"{dockerfile}: FROM {image}: use a local image (forge stack up builds "
                             "openforgerl/base:bookworm) or push it to the local registry")


def build_image(client: Any, context: Path, tag: str, timeout: float = 600) -> str:
    check_bases_local(client, context / "Dockerfile")
    try:
        image, _ = client.images.build(path=str(context), tag=tag, pull=False, rm=True, forcerm=True,
                                       network_mode="host", timeout=int(timeout))
    except docker.errors.BuildError as exc:
        tail = " | ".join(str(line.get("stream", line.get("error", ""))).strip()
                          for line in list(exc.build_log)[-6:] if isinstance(line, dict))
        raise EnvBuildError(f"building {context} failed: {exc.msg}: {tail}",
                            fix="fix the Dockerfile (FROM must be a local image, e.g. openforgerl/base:bookworm)"
                            ) from exc
    except docker.errors.APIError as exc:
        raise EnvBuildError(f"building {context} failed: {exc.explanation or exc}") from exc
    return image.id
