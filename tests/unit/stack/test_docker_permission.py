"""No permission for the Docker socket: one line naming it and the fix, exit 1, nothing changed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
# Root opens any file through CAP_DAC_OVERRIDE; without capabilities it is refused like anyone else.
DROP_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


@pytest.fixture
def locked_socket(tmp_path: Path):
    """A listening unix socket that the user running forge may not open."""
    tmp_path.chmod(0o755)  # traversable, so the refusal comes from the socket itself
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen(1)
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
        path.chmod(0o600 if os.geteuid() == 0 else 0o000)
        yield path


@pytest.fixture(autouse=True)
def can_drop_capabilities() -> None:
    if os.geteuid() == 0 and subprocess.run([*DROP_CAPABILITIES, "true"], capture_output=True).returncode != 0:
        pytest.skip("root here cannot drop its capabilities (setpriv), so no socket can refuse it")


def run_forge_without_access(args: list[str], socket_path: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket_path}", "OPENFORGERL_HOME": str(home),
           "COLUMNS": "300", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    prefix = DROP_CAPABILITIES if os.geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_stack_up_without_socket_permission_says_so_in_one_line(locked_socket, tmp_path):
    result = run_forge_without_access(["stack", "up"], locked_socket, tmp_path / "home")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("DockerError: no permission for the Docker socket")
    assert "docker group" in lines[0]
    assert not (tmp_path / "home" / "state" / "dockerd.pid").exists()


def test_doctor_row_names_the_permission_problem(locked_socket, tmp_path):
    result = run_forge_without_access(["doctor"], locked_socket, tmp_path / "home")
    assert result.returncode == 1
    assert "no permission for the Docker socket" in result.stdout and "docker group" in result.stdout
