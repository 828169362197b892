"""The local image registry: Debian ``docker-registry`` (distribution 2.8) on 127.0.0.1:PORT.

Invariant: the registry only ever listens on loopback, keeps its blobs under
``forge_home()/registry`` and is started by forge with a record in ``state_dir()``, so
``forge stack down`` stops it; a port held by anything that is not an open (no-auth) registry is
reported, never taken over.
"""

from __future__ import annotations

import os
import shutil
import time

import httpx
import yaml

from openforgerl.errors import ResourceError, StackError
from openforgerl.paths import forge_home, state_dir
from openforgerl.stack.apt import apt_install
from openforgerl.stack.part import Action, Part, PartStatus, Reporter
from openforgerl.stack.services import Service, ServiceRecord, port_in_use

HOST = "127.0.0.1"
DEFAULT_PORT = 5000
PORT_ENV = "OPENFORGERL_REGISTRY_PORT"
REGISTRY = Service("registry", ServiceRecord)
START_TIMEOUT_S = 30
PROBE_TIMEOUT_S = 3
API_HEADER = "Docker-Distribution-Api-Version"


def registry_port() -> int:
    """The port forge's registry uses: $OPENFORGERL_REGISTRY_PORT or 5000."""
    return int(os.environ.get(PORT_ENV) or DEFAULT_PORT)


def registry_address(port: int | None = None) -> str:
    """``host:port`` to prefix image names with when pushing (``127.0.0.1:5000/name:tag``)."""
    return f"{HOST}:{port or registry_port()}"


def probe_registry(port: int) -> tuple[str, str]:
    """(state, detail): state is ``up``, ``free`` (nothing there) or ``foreign`` (something else)."""
    url = f"http://{HOST}:{port}/v2/"
    try:
        # trust_env=False: a proxy from the environment must never see loopback traffic.
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        if port_in_use(HOST, port):
            return "foreign", (f"port {port} on {HOST} is taken by something that does not answer HTTP "
                               f"({type(exc).__name__})")
        return "free", f"no registry running on {HOST}:{port}"
    is_registry = response.headers.get(API_HEADER, "").startswith("registry/2")
    if response.status_code == 200 and is_registry:
        return "up", f"registry at {HOST}:{port} ({response.headers[API_HEADER]})"
    what = "a registry that requires login" if is_registry else "something that is not a Docker registry"
    return "foreign", f"port {port} on {HOST} is taken by {what} (GET /v2/ -> HTTP {response.status_code})"


def write_config(port: int) -> str:
    """The registry's config (YAML in state_dir()); returns its path."""
    storage = forge_home() / "registry"
    storage.mkdir(parents=True, exist_ok=True)
    config = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"{HOST}:{port}", "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }
    path = state_dir() / "registry.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return str(path)


def registry_binary() -> str | None:
    return shutil.which("docker-registry") or shutil.which("docker-registry", path="/usr/bin:/usr/sbin")


class RegistryPart(Part):
    """An open registry on 127.0.0.1:``port`` that ``docker push``/``pull`` can use without login."""

    name = "registry"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or registry_port()

    def _port_fix(self) -> str:
        return (f"stop what listens there (ss -ltnp 'sport = :{self.port}') or use another port: "
                f"{PORT_ENV}=<free port> forge stack up")

    def check(self) -> PartStatus:
        state, detail = probe_registry(self.port)
        if state == "up" and REGISTRY.running():
            detail += f", started by forge, storage {forge_home() / 'registry'}"
        fix = self._port_fix() if state == "foreign" else "forge stack up"
        return self.status(state == "up", detail, fix=fix)

    def ensure(self, report: Reporter) -> PartStatus:
        with REGISTRY.exclusive():
            return self._ensure(report)

    def _ensure(self, report: Reporter) -> PartStatus:
        state, detail = probe_registry(self.port)
        if state == "up":
            return self.check()
        if state == "foreign":
            raise ResourceError(detail, fix=self._port_fix())
        if registry_binary() is None:
            apt_install(["docker-registry"])
            report(Action("installed Debian package docker-registry", "apt-get remove -y docker-registry"))
            if probe_registry(self.port)[0] == "up":  # its init script may have started one
                return self.check()
        return self._start(report)

    def _start(self, report: Reporter) -> PartStatus:
        binary = registry_binary()
        if binary is None:
            raise StackError("docker-registry installed but its binary is missing",
                             fix="apt-get install --reinstall docker-registry")
        earlier = REGISTRY.stop()  # ours, but not answering here (another port, or wedged)
        if earlier:
            report(Action(f"stopped the docker-registry forge started earlier (pid {earlier.pid}), "
                          f"which did not answer on {HOST}:{self.port}", "forge stack up with its old port"))
        began = time.monotonic()
        record = REGISTRY.start([binary, "serve", write_config(self.port)])
        self._wait_until_up(record)
        report(Action(f"started docker-registry on {HOST}:{self.port} (pid {record.pid}, up in "
                      f"{time.monotonic() - began:.1f} s, storage {forge_home() / 'registry'}, "
                      f"log {REGISTRY.log_file})",
                      f"kill $(cat {REGISTRY.pid_file})"))
        return self.check()

    def _wait_until_up(self, record: ServiceRecord) -> None:
        REGISTRY.await_ready(record, lambda: probe_registry(self.port)[0] == "up", START_TIMEOUT_S, StackError,
                             what=f"docker-registry on {HOST}:{self.port}", poll_s=0.2)

    def stop(self) -> list[str]:
        record = REGISTRY.stop()
        return [f"stopped docker-registry (pid {record.pid})"] if record else []
