"""The local Docker engine: find it, install it (Debian ``docker.io``), start ``dockerd``, connect.

Invariant: ``check`` only pings; ``ensure`` installs or starts only what is missing, and a
``dockerd`` it starts is recorded in ``state_dir()/dockerd.json`` so ``forge stack down`` stops that
one and never an engine someone else runs.
"""

from __future__ import annotations

import shutil
import time

from docker.errors import DockerException

from openforgerl.containers.client import NO_PERMISSION_FIX, connect, is_permission_error, socket_hint
from openforgerl.errors import DockerError
from openforgerl.stack.apt import apt_install, is_root
from openforgerl.stack.part import Action, Part, PartStatus, Reporter
from openforgerl.stack.services import Service, ServiceRecord

PING_TIMEOUT_S = 5
START_TIMEOUT_S = 60
DOCKERD = Service("dockerd", ServiceRecord)


def _answers() -> bool:
    try:
        connect(PING_TIMEOUT_S)
        return True
    except DockerException:
        return False


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
            version = connect(PING_TIMEOUT_S).version().get("Version", "?")
        except DockerException as exc:
            if is_permission_error(exc):
                return "no-permission", f"no permission for the Docker socket ({socket_hint()})"
            if dockerd_binary() is None:
                return "not-installed", "Docker engine not installed (no dockerd)"
            return "down", f"Docker engine not running (nothing answers at {socket_hint()})"
        started = " (started by forge)" if DOCKERD.running() else ""
        return "up", f"Docker {version} at {socket_hint()}{started}"

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
        DOCKERD.await_ready(record, _answers, START_TIMEOUT_S, DockerError, what="dockerd",
                            exited_fix=f"read {DOCKERD.log_file}; another engine may hold /var/run/docker.pid")

    def stop(self) -> list[str]:
        record = DOCKERD.stop()
        return [f"stopped dockerd (pid {record.pid})"] if record else []
