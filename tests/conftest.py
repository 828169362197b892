"""Shared fixtures: task directories built on disk for tests."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_task(root: Path, name: str = "hello", toml: str | None = None, *, dockerfile: bool = True,
               test_sh: bool = True, solution: bool = True, instruction: str = "Create hello.txt containing hi.\n") -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(
        toml if toml is not None else '[task]\nname = "hello"\ndomain = "claw"\n\n[agent]\ntimeout_sec = 60\n')
    (task / "instruction.md").write_text(instruction)
    if dockerfile:
        (task / "environment" / "Dockerfile").write_text("FROM openforgerl/base:bookworm\nWORKDIR /app\n")
    if test_sh:
        (task / "tests" / "test.sh").write_text(
            "#!/bin/bash\nmkdir -p /logs/verifier\n"
            "if grep -qx hi /app/hello.txt; then r=1; else r=0; fi\n"
            "echo \"{\\\"reward\\\": $r}\" > /logs/verifier/reward.json\n")
    if solution:
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho hi > /app/hello.txt\n")
    return task


@pytest.fixture
def make_task(tmp_path: Path):
    def make(name: str = "hello", toml: str | None = None, **kwargs) -> Path:
        return write_task(tmp_path, name, toml, **kwargs)

    return make
