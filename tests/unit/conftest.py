"""Unit tests are hermetic: their own forge home and data dir, and no Docker engine, never the machine's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def own_forge_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "forge-home"
    monkeypatch.setenv("OPENFORGERL_HOME", str(home))
    monkeypatch.delenv("OPENFORGERL_DATA", raising=False)
    for name in ("OPENFORGERL_DEBIAN_MIRROR", "OPENFORGERL_REGISTRY_PORT"):
        monkeypatch.delenv(name, raising=False)
    # A unit test that reaches for the real engine fails here instead of passing only where one runs.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker-in-unit-tests.sock")
    return home
