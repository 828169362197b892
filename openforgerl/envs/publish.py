"""Publishing validated task images: tag + push to a registry, pin by digest, record what was measured.

Invariant: a task's ``[environment] docker_image`` is only ever a ``registry/repo@sha256:...`` reference
that this module got back from a push of the image its environment/ was validated with; the
validation results go to ``[validation]`` (pass or fail); published tasks are then listed in the
manifest (``openforgerl.manifest``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import docker.errors

from openforgerl.errors import EnvBuildError
from openforgerl.tasks import Task

_push_lock = threading.Lock()


def push_image(client: Any, image: str, registry: str) -> tuple[str, str]:
    """Tag ``image`` (``repo:tag``) under ``registry`` and push it; returns (tag ref, digest ref)."""
    repo, _, tag = image.rpartition(":")
    target = f"{registry}/{repo}"
    try:
        client.images.get(image).tag(target, tag)
        with _push_lock:  # one push at a time: shared layers are uploaded once
            events = list(client.api.push(target, tag=tag, stream=True, decode=True))
    except (docker.errors.APIError, OSError) as exc:
        raise EnvBuildError(f"pushing {target}:{tag} failed: {exc}",
                            fix="check the registry is up (forge stack up) or pass --push REGISTRY") from exc
    errors = [e.get("error") or e.get("errorDetail", {}).get("message") for e in events
              if "error" in e or "errorDetail" in e]
    if errors:
        raise EnvBuildError(f"pushing {target}:{tag} failed: {errors[0]}",
                            fix="check the registry is up (forge stack up) or pass --push REGISTRY")
    digests = [e["aux"]["Digest"] for e in events if isinstance(e.get("aux"), dict) and "Digest" in e["aux"]]
    if not digests:
        raise EnvBuildError(f"pushing {target}:{tag} returned no digest", fix="retry; check the registry's log")
    return f"{target}:{tag}", f"{target}@{digests[-1]}"


def clear_own_pin(task: Task) -> None:
    """Drop a ``docker_image`` this tool pinned earlier, so the environment is rebuilt and revalidated.

    A pin the task came with (Harbor's prebuilt image) is kept: it is not ours to replace.
    """
    env, validation = task.config.environment, task.config.validation
    if env.docker_image and env.docker_image == validation.image_digest and task.dockerfile.is_file():
        env.docker_image = None
        task.save()


def record_validation(task_dir: Path, values: dict[str, Any], pin: str | None) -> None:
    """Write ``[validation]`` (and ``[environment] docker_image`` when pinned) into task.toml."""
    task = Task.load(task_dir)
    for key, value in values.items():
        setattr(task.config.validation, key, value)
    if pin:
        task.config.environment.docker_image = pin
    task.save()
