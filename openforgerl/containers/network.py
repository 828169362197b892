"""The networks sandboxes join, and what of this host they may reach.

``isolated`` (the default): an internal Docker network (no route out) with inter-container traffic
off; ``egress``: the same but with a route out, for tasks that declare they need the internet.
Each is a bridge whose host side (the gateway address) is the only way a sandbox reaches this
machine, and a host firewall chain on that bridge rejects everything but the ports a run opens
for its proxy's model API (``allow_port``): a host service listening on 0.0.0.0 (sshd, a dev
server) stays out of reach, so do the registry and vLLM on 127.0.0.1.

Invariant: ``ensure_network`` is idempotent and safe to race (two runs may create it at once);
an existing network with other settings is refused, never silently used; a port opened for a run
carries the owning pid, and rules of owners that died are swept the next time a network is ensured.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import docker.errors

from openforgerl.errors import SandboxError, UserError
from openforgerl.processes import is_alive

NetworkKind = Literal["isolated", "egress"]
LABEL = "openforgerl.network"
HOST_NETWORK_FIX = "or run with network=host, which gives sandboxes this host's whole network (unsafe for RL)"


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    bridge: str
    """The host-side interface name (at most 15 characters)."""
    internal: bool


SPECS: dict[NetworkKind, NetworkSpec] = {
    "isolated": NetworkSpec("openforgerl-isolated", "forge-iso0", internal=True),
    "egress": NetworkSpec("openforgerl-egress", "forge-egress0", internal=False),
}


@dataclass(frozen=True)
class SandboxNetwork:
    """A network sandboxes join: its Docker name and the address this host has on it."""

    name: str
    gateway: str
    bridge: str


def ensure_network(client: Any, kind: NetworkKind) -> SandboxNetwork:
    """The ``kind`` network, created when missing (with its firewall chain), checked when present."""
    spec = SPECS[kind]
    network = _find(client, spec.name) or _create(client, spec)
    _check(network.attrs, spec)
    gateway = _gateway(network.attrs, spec)
    ensure_chain(spec.bridge)
    sweep_rules(spec.bridge)
    return SandboxNetwork(spec.name, gateway, spec.bridge)


def _find(client: Any, name: str) -> Any | None:
    try:
        return client.networks.get(name)
    except docker.errors.NotFound:
        return None


def _create(client: Any, spec: NetworkSpec) -> Any:
    options = {"com.docker.network.bridge.enable_icc": "false", "com.docker.network.bridge.name": spec.bridge}
    try:
        return client.networks.create(spec.name, driver="bridge", internal=spec.internal, options=options,
                                      labels={LABEL: "1"}, check_duplicate=True)
    except docker.errors.APIError as exc:
        raced = _find(client, spec.name)  # another run created it between our look-up and create
        if raced is not None:
            return raced
        raise SandboxError(f"the Docker engine cannot create the {spec.name} network "
                           f"({'internal, ' if spec.internal else ''}no inter-container traffic): "
                           f"{exc.explanation or exc}", fix=f"use an engine with bridge networks, {HOST_NETWORK_FIX}"
                           ) from exc


def _check(attrs: dict[str, Any], spec: NetworkSpec) -> None:
    options = attrs.get("Options") or {}
    wrong = []
    if bool(attrs.get("Internal")) != spec.internal:
        wrong.append(f"internal={attrs.get('Internal')}")
    if options.get("com.docker.network.bridge.enable_icc") != "false":
        wrong.append("inter-container traffic on")
    if options.get("com.docker.network.bridge.name") != spec.bridge:
        wrong.append(f"bridge {options.get('com.docker.network.bridge.name')}")
    if wrong:
        raise UserError(f"Docker network {spec.name} exists with other settings ({', '.join(wrong)})",
                        fix=f"remove it (docker network rm {spec.name}) and rerun; forge recreates it")


def _gateway(attrs: dict[str, Any], spec: NetworkSpec) -> str:
    for config in (attrs.get("IPAM") or {}).get("Config") or []:
        gateway = config.get("Gateway", "")
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", gateway):
            return gateway
    raise SandboxError(f"Docker network {spec.name} has no IPv4 gateway",
                       fix=f"remove it (docker network rm {spec.name}) and rerun")


# ---- the host firewall on a sandbox bridge ----------------------------------------------------

def chain_name(bridge: str) -> str:
    """The firewall chain of a sandbox bridge (forge-iso0 -> FORGE-ISO0)."""
    return bridge.upper()[:28]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("iptables") or shutil.which("iptables", path="/usr/sbin:/sbin")
    if binary is None:
        raise SandboxError("iptables not found: the sandbox network's host firewall cannot be set",
                           fix=f"install iptables (Debian: apt-get install -y iptables), {HOST_NETWORK_FIX}")
    out = subprocess.run([binary, "-w", "10", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise SandboxError(f"iptables {' '.join(args)} failed: {out.stderr.strip()[:300]}",
                           fix=f"run forge as root (it manages its sandbox firewall), {HOST_NETWORK_FIX}")
    return out


def ensure_chain(bridge: str) -> None:
    """INPUT from ``bridge`` goes through a chain that answers replies, then rejects everything."""
    chain = chain_name(bridge)
    if _iptables("-n", "-L", chain, check=False).returncode != 0:
        _iptables("-N", chain)
        _iptables("-A", chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
        _iptables("-A", chain, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")
        _iptables("-A", chain, "-j", "REJECT")
    jump = ("INPUT", "-i", bridge, "-j", chain)
    if _iptables("-C", *jump, check=False).returncode != 0:
        _iptables("-I", *jump)


def _owner(pid: int) -> str:
    return f"forge-pid-{pid}"


def allow_port(bridge: str, port: int) -> None:
    """Let sandboxes on ``bridge`` reach ``port`` on this host (the proxy's model API), for this process."""
    _iptables("-I", chain_name(bridge), "-p", "tcp", "--dport", str(port), "-m", "comment",
              "--comment", _owner(os.getpid()), "-j", "ACCEPT")


def revoke_port(bridge: str, port: int) -> None:
    _iptables("-D", chain_name(bridge), "-p", "tcp", "--dport", str(port), "-m", "comment",
              "--comment", _owner(os.getpid()), "-j", "ACCEPT", check=False)


@contextlib.contextmanager
def open_port(bridge: str, port: int) -> Iterator[None]:
    allow_port(bridge, port)
    try:
        yield
    finally:
        revoke_port(bridge, port)


def sweep_rules(bridge: str) -> int:
    """Delete the ACCEPT rules of owners that are gone; returns how many."""
    listed = _iptables("-S", chain_name(bridge), check=False).stdout.splitlines()
    removed = 0
    for rule in listed:
        owner = re.search(r"forge-pid-(\d+)", rule)
        if owner and not is_alive(int(owner.group(1))) and rule.startswith("-A "):
            _iptables("-D", *rule[3:].replace('"', "").split(), check=False)
            removed += 1
    return removed
