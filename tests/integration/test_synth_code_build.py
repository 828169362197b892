"""Synthesised code tasks through the real ``forge build-env``: ten tasks mixing the code families and the
bundled repositories, each with its own buggy (or stubbed) module in the image, built and run in real
containers: the unchanged task scores 0 (nop) and the reverse patch in solve.sh scores 1 (oracle).

The goal of the pipeline is a build-env pass rate of at least 95%; this checks at least 9 of 10.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from openforgerl.synth.assets import bundled_assets
from openforgerl.synth.critic import criticise
from openforgerl.synth.families import family
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.writer import write_task

pytestmark = pytest.mark.docker

TASKS = 10
SEED = 7
MIN_PASSING = 9


def synthesise(out: Path, state_root: Path) -> list[Path]:
    """TASKS kept candidates, one family after another over the four repositories."""
    assets = bundled_assets("code")
    states = {asset.name: asset.materialize(state_root / asset.name) for asset in assets}
    names = sorted({name for asset in assets for name in asset.config.families})
    written: list[Path] = []
    index = 0
    while len(written) < TASKS and index < 4 * TASKS:
        asset = assets[index % len(assets)]
        name = names[index % len(names)]
        slot = Slot(asset, family(name), states[asset.name])
        candidate = procedural(slot, index, SEED)
        index += 1
        if criticise(candidate, slot.family, slot.asset, slot.state):
            written.append(write_task(candidate, asset, out))
    return written


def test_ten_synthesised_code_tasks_build_and_validate_in_real_containers(tmp_path: Path):
    tasks = synthesise(tmp_path / "tasks", tmp_path / "state")
    assert len(tasks) == TASKS
    assert len({tuple(p.name.split("-")[1:3]) for p in tasks}) >= 5  # a mix of repositories and families

    started = time.monotonic()
    env = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run([sys.executable, "-m", "openforgerl", "build-env", str(tmp_path / "tasks"), "--no-push",
                           "--repeats", "1", "--rounds", "0", "--out-dir", str(tmp_path / "out"),
                           "--manifest", str(tmp_path / "manifest.jsonl")],
                          capture_output=True, text=True, timeout=900, env=env)
    seconds = time.monotonic() - started

    saved = {task.name: tomllib.loads((task / "task.toml").read_text()) for task in tasks}
    passed = sorted(name for name, config in saved.items() if config.get("validation", {}).get("passed") is True)
    failed = sorted(set(saved) - set(passed))
    print(f"build-env: {len(passed)}/{len(tasks)} passed in {seconds:.0f} s; failed: {failed}")
    assert len(passed) >= MIN_PASSING, (failed, done.stdout[-3000:], done.stderr[-3000:])
