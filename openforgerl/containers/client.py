"""The Docker SDK client every part of forge uses, connected or a ``DockerError`` saying how to get one."""

from __future__ import annotations

import os

import docker
from docker.errors import DockerException

from openforgerl.errors import DockerError

NO_PERMISSION_FIX = ("add your user to the docker group (sudo usermod -aG docker $USER, then log in again) "
                     "or run forge as root")


def socket_hint() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def is_permission_error(exc: BaseException) -> bool:
    """The SDK wraps the socket's EACCES a few layers deep (requests -> urllib3 -> OSError)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        err = stack.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, PermissionError):
            return True
        stack.extend([err.__cause__, err.__context__, *(a for a in err.args if isinstance(a, BaseException))])
    return "Permission denied" in str(exc)


def connect(timeout: float) -> docker.DockerClient:
    # The SDK hands timeout to requests, which takes seconds as a float; types-docker says int.
    client = docker.from_env(timeout=timeout)  # type: ignore[arg-type]
    client.ping()
    return client


def docker_client(timeout: float = 120) -> docker.DockerClient:
    """A connected Docker SDK client, or a DockerError that tells the user how to get one."""
    try:
        return connect(timeout)
    except DockerException as exc:
        if is_permission_error(exc):
            raise DockerError(f"no permission for the Docker socket ({socket_hint()})",
                              fix=NO_PERMISSION_FIX) from exc
        raise DockerError(f"the Docker engine at {socket_hint()} does not answer",
                          fix="forge stack up") from exc
