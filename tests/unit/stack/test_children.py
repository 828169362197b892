"""Children of forge die with the step that started them, and a killed job's survivors can be found."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openforgerl.processes import is_alive
from openforgerl.stack import children, staging


def test_run_captures_output_and_passes_the_tag(tmp_path: Path):
    out = children.run(["sh", "-c", 'echo "$OPENFORGERL_JOB"; echo err >&2; exit 3'], tag="job-1")
    assert (out.returncode, out.stdout, out.stderr) == (3, "job-1\n", "err\n")


def test_a_grandchild_left_running_in_the_group_is_killed_when_the_step_ends(tmp_path: Path):
    pid_file = tmp_path / "pid"
    # The background sleep keeps no pipe open (>/dev/null), so the step itself ends at once.
    children.run(["sh", "-c", f"sleep 30 >/dev/null 2>&1 & echo $! > {pid_file}"], tag="job-2")
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_alive(pid)


def test_a_timeout_kills_the_whole_group(tmp_path: Path):
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(["sh", "-c", f"sleep 30 & echo $! > {pid_file}; wait"], tag="job-3", timeout=0.5)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_alive(pid)


def test_kill_tagged_finds_processes_by_the_tag_in_their_environment():
    tagged = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              env={**os.environ, children.TAG_VARIABLE: "/some/build"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, children.TAG_VARIABLE: "/some/build-2"})
    try:
        time.sleep(0.1)  # let both exec, so /proc/PID/environ is theirs
        assert children.kill_tagged("/some/build") == [tagged.pid]  # and waited for: it is gone now
        assert not is_alive(tagged.pid) and other.poll() is None
    finally:
        for proc in (tagged, other):
            proc.kill()
            proc.wait()


def test_swap_in_replaces_a_directory_whole(tmp_path: Path):
    target, build = tmp_path / "thing", tmp_path / ".thing.tmp-1"
    target.mkdir()
    (target / "old").write_text("old")
    build.mkdir()
    (build / "new").write_text("new")
    staging.swap_in(build, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
    assert [p.name for p in target.iterdir()] == ["new"]


def test_staged_deletes_the_build_on_failure_and_keeps_the_lock_file(tmp_path: Path):
    target = tmp_path / "thing"
    with pytest.raises(RuntimeError), staging.staged(target) as build:
        build.mkdir()
        (build / "half").write_text("x")
        raise RuntimeError("failed midway")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".thing.lock"]
