"""Image references and the one pull policy: nothing is ever pulled except from a loopback registry.

Docker pulls a missing image from a public registry on its own (``docker run``, a ``FROM`` line);
a rollout or a build must never depend on that. Invariant: every place that needs an image calls
``ensure_local``, which finds it locally or pulls it from a registry on this machine, and refuses
anything else with the caller's error type and fix.
"""

from __future__ import annotations

from typing import Any

import docker.errors

from openforgerl.errors import ForgeError

LOCAL_REGISTRY_FIX = "check the local registry (forge stack up) and that the image was pushed (forge build-env)"


def registry_host(image: str) -> str:
    """The registry host of an image reference, "" when it names none (``debian:12``, ``org/name``)."""
    first, sep, _ = image.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        return ""  # Docker Hub style: the first part is a namespace, not a host
    if first.startswith("["):
        return first[: first.find("]") + 1]
    return first.rsplit(":", 1)[0] if ":" in first else first


def is_loopback_registry(image: str) -> bool:
    host = registry_host(image)
    return host in ("localhost", "127.0.0.1", "[::1]") or host.startswith("127.")


def ensure_local(client: Any, image: str, error: type[ForgeError], *, fix: str) -> bool:
    """Make ``image`` present in the engine; returns whether it had to be pulled.

    Present already, or pulled from a loopback registry; anything else raises ``error`` with ``fix``
    (the image would come from a public registry)."""
    try:
        client.images.get(image)
        return False
    except docker.errors.ImageNotFound:
        pass
    if not is_loopback_registry(image):
        raise error(f"image {image} is not present locally and would be pulled from a public registry", fix=fix)
    try:
        client.images.pull(image)
    except docker.errors.APIError as exc:
        raise error(f"pulling {image} from the local registry failed: {exc.explanation or exc}",
                    fix=LOCAL_REGISTRY_FIX) from exc
    return True
