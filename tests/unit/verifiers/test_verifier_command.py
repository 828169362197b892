"""Command check: the exit code decides; a hung command is killed with everything it started."""

from __future__ import annotations

import time


def test_exit_code_decides(box):
    box.write("/app/out.txt", "42\n")
    assert box.verify({"type": "command", "command": 'grep -qx 42 "$FORGE_ROOT/app/out.txt"'}).reward == 1.0
    assert box.verify({"type": "command", "command": 'grep -qx 43 "$FORGE_ROOT/app/out.txt"'}).reward == 0.0
    assert box.verify({"type": "command", "command": "exit 3", "expect_exit": 3}).reward == 1.0


def test_runs_in_cwd_and_records_the_output_tail(box):
    box.write("/app/src/main.py", "print('hi')\n")
    verdict = box.verify({"type": "command", "command": "ls; exit 1", "cwd": "/app/src"})
    assert verdict.reward == 0.0 and "main.py" in verdict.metrics["output_tail"]
    assert verdict.metrics["exit_code"] == 1


def test_a_hung_command_times_out_and_its_children_die(box):
    started = time.monotonic()
    verdict = box.verify({"type": "command", "command": "sleep 60 & sleep 60", "timeout_sec": 1})
    assert verdict.reward == 0.0 and "timed out" in verdict.metrics["error"]
    assert time.monotonic() - started < 30


def test_a_missing_cwd_fails_the_check(box):
    verdict = box.verify({"type": "command", "command": "true", "cwd": "/nowhere"})
    assert verdict.reward == 0.0 and "nowhere" in verdict.metrics["error"]
