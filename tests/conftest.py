"""Shared fixtures: task directories built on disk for tests (``openforgerl.testing.tasks``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openforgerl.testing.tasks import write_task


@pytest.fixture
def make_task(tmp_path: Path):
    def make(name: str = "hello", toml: str | None = None, **kwargs) -> Path:
        return write_task(tmp_path, name, toml, **kwargs)

    return make
