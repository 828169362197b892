"""The local Docker engine: find it, install it (Debian ``docker.io``), start ``dockerd``, connect.

Invariant: ``check`` only pings; ``ensure`` installs or starts only what is missing, and a
``dockerd`` it starts is recorded in ``state_dir()/dockerd.json`` so ``forge stack down`` stops that
one and never an engine someone else runs.
"""

from __future__ import annotations

import os
import shutil
import time

import docker
from docker.errors import DockerException

from openforgerl.envs.apt import apt_install, is_root
from openforgerl.errors import DockerError
from openforgerl.services import Service, ServiceRecord
from openforgerl.stack import Action, Part, PartStatus, Reporter

PING_TIMEOUT_S = 5
START_TIMEOUT_S = 60
DOCKERD = Service("dockerd", ServiceRecord)

NO_PERMISSION_FIX = ("add your user to the docker group (sudo usermod -aG docker $USER, then log in again) "
                     "or run forge as root")


def _socket_hint() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _is_permission_error(exc: BaseException) -> bool:
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


def _connect(timeout: float) -> docker.DockerClient:
    client = docker.from_env(timeout=timeout)
    client.ping()
    return client


def _answers() -> bool:
    try:
        _connect(PING_TIMEOUT_S)
        return True
    except DockerException:
        return False


def docker_client(timeout: float = 120) -> docker.DockerClient:
    """A connected Docker SDK client, or a DockerError that tells the user how to get one."""
    try:
        return _connect(timeout)
    except DockerException as exc:
        if _is_permission_error(exc):
            raise DockerError(f"no permission for the Docker socket ({_socket_hint()})",
                              fix=NO_PERMISSION_FIX) from exc
        raise DockerError(f"the Docker engine at {_socket_hint()} does not answer",
                          fix="forge stack up") from exc


def dockerd_binary() -> str | None:
    # Non-root PATHs often lack /usr/sbin, where Debian puts dockerd.
    return shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin:/sbin:/bin")


class DockerEnginePart(Part):
    """A Docker engine answering on ``DOCKER_HOST`` (default: the local unix socket)."""

    name = "docker"

    def check(self) -> PartStatus:
        state, detail = self._probe()
        fixes = {"no-permission": NO_PERMISSION_FIX,
                 "not-installed": "forge stack up (as root it installs Debian docker.io)",
                 "down": "forge stack up"}
        return self.status(state == "up", detail, fix=fixes.get(state))

    def _probe(self) -> tuple[str, str]:
        """(state, detail) with state one of up, no-permission, not-installed, down."""
        try:
            version = _connect(PING_TIMEOUT_S).version().get("Version", "?")
        except DockerException as exc:
            if _is_permission_error(exc):
                return "no-permission", f"no permission for the Docker socket ({_socket_hint()})"
            if dockerd_binary() is None:
                return "not-installed", "Docker engine not installed (no dockerd)"
            return "down", f"Docker engine not running (nothing answers at {_socket_hint()})"
        started = " (started by forge)" if DOCKERD.running() else ""
        return "up", f"Docker {version} at {_socket_hint()}{started}"

    def ensure(self, report: Reporter) -> PartStatus:
        with DOCKERD.exclusive():
            return self._ensure(report)

    def _ensure(self, report: Reporter) -> PartStatus:
        state, detail = self._probe()
        if state == "no-permission":
            raise DockerError(detail, fix=NO_PERMISSION_FIX)
        if state == "not-installed":
            self._install(report)
            state, detail = self._probe()  # the package's init script may have started it already
        if state == "up":
            return self.check()
        if not is_root():
            raise DockerError("the Docker engine is not running and only root can start dockerd",
                              fix="sudo forge stack up, or start your engine (sudo systemctl start docker)")
        return self._start(report)

    def _install(self, report: Reporter) -> None:
        if not is_root():
            raise DockerError("the Docker engine is not installed (no dockerd) and forge is not root",
                              fix="sudo apt-get install -y docker.io, or rerun forge stack up as root")
        apt_install(["docker.io"])
        report(Action("installed Debian package docker.io", "apt-get remove -y docker.io"))

    def _start(self, report: Reporter) -> PartStatus:
        binary = dockerd_binary()
        if binary is None:
            raise DockerError("docker.io installed but no dockerd binary found",
                              fix="apt-get install --reinstall docker.io")
        began = time.monotonic()
        record = DOCKERD.start([binary])
        self._wait_until_up(record)
        report(Action(f"started dockerd (pid {record.pid}, up in {time.monotonic() - began:.0f} s, "
                      f"log {DOCKERD.log_file})",
                      f"kill $(cat {DOCKERD.pid_file})"))
        return self.check()

    def _wait_until_up(self, record: ServiceRecord) -> None:
        outcome = DOCKERD.wait_ready(record, _answers, START_TIMEOUT_S)
        if outcome == "exited":
            raise DockerError(f"dockerd exited while starting: {DOCKERD.log_tail()}",
                              fix=f"read {DOCKERD.log_file}; another engine may hold /var/run/docker.pid")
        if outcome == "timed out":
            raise DockerError(f"dockerd (pid {record.pid}) did not answer within {START_TIMEOUT_S} s: "
                              f"{DOCKERD.log_tail()}",
                              fix=f"read {DOCKERD.log_file}; stop it with kill {record.pid}")

    def stop(self) -> list[str]:
        record = DOCKERD.stop()
        return [f"stopped dockerd (pid {record.pid})"] if record else []
