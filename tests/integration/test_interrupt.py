"""Ctrl-C and SIGTERM in the middle of `forge rollout`: the rollouts in flight are recorded, the summary
is written, nothing is left running, the exit code says which signal, and the next run works."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from openforgerl.rollout.runtime import LABEL_RUN
from openforgerl.testing.tasks import write_task

pytestmark = pytest.mark.docker


def containers(run: str) -> list:
    return docker.from_env().containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"})


def rollout(task: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "openforgerl", "rollout", str(task), "--harness", "oracle",
                             "--run-dir", str(run_dir), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_records_what_was_in_flight_and_the_next_run_works(tmp_path: Path, sig, code):
    slow = write_task(tmp_path / "tasks", "slow", solution="#!/bin/bash\nsleep 120\necho hi > /app/hello.txt\n")
    run_dir = tmp_path / "interrupted"
    proc = rollout(slow, run_dir, "-n", "4", "--concurrency", "2")
    deadline = time.monotonic() + 180
    while len([c for c in containers(run_dir.name) if c.status == "running"]) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.5)
    time.sleep(2)  # the agents are at work
    proc.send_signal(sig)
    assert proc.wait(timeout=90) == code, proc.stderr.read()
    lines = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == ["cancelled", "cancelled"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["statuses"]["cancelled"] == 2 and summary["not_started"] == 2
    assert containers(run_dir.name) == []

    quick = write_task(tmp_path / "tasks", "quick")
    again = rollout(quick, tmp_path / "again")
    assert again.wait(timeout=180) == 0, again.stderr.read()
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["statuses"]["success"] == 1
