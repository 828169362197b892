"""Synthesised claw tasks through the real ``forge build-env``: the home and office images built once each,
nop and the oracle (solve.sh as the unprivileged agent, the mail and calendar services running) in real
containers. What the host dry run promised must hold in the sandbox: nop scores 0 and the oracle 1 for at
least 9 of 10 tasks (the pipeline's goal is a build-env pass rate of 95%)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openforgerl.envs.build import BuildEnvConfig, build_envs
from openforgerl.synth.assets import bundled_assets
from openforgerl.synth.critic import criticise
from openforgerl.synth.families import family
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.writer import write_task

pytestmark = pytest.mark.docker

CHOSEN = ["claw.files.aggregate", "claw.files.convert", "claw.files.organize", "claw.config.set_ini",
          "claw.logs.count", "claw.ics.agenda", "claw.mail.send", "claw.mail.reply", "claw.calendar.move",
          "claw.office.accept_invite"]
"""Ten families, five of each asset: files, configs, logs, the calendar file; SMTP, Maildir and calendar service."""
SEED = 2024


def synthesise(tmp_path: Path) -> list[Path]:
    """One kept candidate of each chosen family, written as a task directory."""
    written: list[Path] = []
    for asset in bundled_assets("claw"):
        state = asset.materialize(tmp_path / "state" / asset.name)
        for name in (n for n in asset.config.families if n in CHOSEN):
            slot = Slot(asset, family(name), state)
            candidate = procedural(slot, 0, SEED)
            assert criticise(candidate, slot.family, asset, state), (name, candidate.reason_code, candidate.reason)
            written.append(write_task(candidate, asset, tmp_path / "tasks" / candidate.id))
    return written


def test_synthesised_claw_tasks_pass_build_env_in_real_containers(tmp_path: Path):
    tasks = synthesise(tmp_path)
    assert len(tasks) == len(CHOSEN)
    config = BuildEnvConfig(tasks=[str(t) for t in tasks], push=False, repeats=1,
                            out_dir=str(tmp_path / "out"), manifest=str(tmp_path / "manifest.jsonl"))
    report = asyncio.run(build_envs(config))
    failed = {o.task: (o.stage, o.reason) for o in report.outcomes if not o.passed}
    passed = [o for o in report.outcomes if o.passed]
    assert len(report.outcomes) == len(CHOSEN) and len(passed) >= 9, failed
    assert all(o.rounds[0].nop_rewards == [0.0] and o.rounds[0].oracle_rewards == [1.0] for o in passed)
    assert sum(round_.built for o in report.outcomes for round_ in o.rounds) <= 2  # one image per asset
