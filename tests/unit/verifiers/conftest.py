"""A container filesystem stand-in: specs compile into tests/ and run against root/ on the host."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openforgerl.verifiers.reward import Verdict
from openforgerl.verifiers import compile_verifier, run_compiled


@dataclass
class Sandbox:
    """``root`` plays the container's /; ``tests`` is the task's compiled tests/ dir."""

    root: Path
    tests: Path

    def write(self, container_path: str, content: str | bytes) -> Path:
        target = self.path(container_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        return target

    def path(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def verify(self, spec: Any, env: dict[str, str] | None = None) -> Verdict:
        compile_verifier(spec, self.tests)
        return run_compiled(self.tests, self.root, env=env, timeout=120)

    def reward_file(self) -> dict:
        return json.loads(self.path("/logs/verifier/reward.json").read_text())


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    return Sandbox(root=root, tests=tmp_path / "tests")
