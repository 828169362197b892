"""Behaviour metrics on hand-made trajectories whose answers are known, one harness vocabulary at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openforgerl.evaluation.actions import actions, is_error, shell_kinds
from openforgerl.evaluation.behaviour import DEFINITIONS, Behaviour, aggregate, analyse

REACT = ["shell", "read_file", "write_file", "finish"]


def trajectory(*turns: dict[str, Any], offered: list[str] = REACT) -> dict[str, Any]:
    """Each turn: {"calls": [(tool, args)], "results": [text answering the previous turn's calls], "text"}."""
    calls, asked = [], []
    for index, turn in enumerate(turns):
        results = [{"tool": asked[i] if i < len(asked) else "", "text": text}
                   for i, text in enumerate(turn.get("results", []))]
        made = [{"name": name, "args": json.dumps(args) if isinstance(args, dict) else args}
                for name, args in turn.get("calls", [])]
        calls.append({"index": index, "status": "ok", "tokens_in": 100, "tokens_out": 10,
                      "digest": {"offered": offered, "results": results, "calls": made,
                                 "text": turn.get("text", "")}})
        asked = [name for name, _ in turn.get("calls", [])]
    return {"calls": calls}


def result(status: str = "success", exit_code: int | None = 0, **extra: Any) -> dict[str, Any]:
    return {"rollout_id": "r-1", "task": "t", "harness": "react", "status": status,
            "harness_exit_code": exit_code, "reward": 1.0 if status == "success" else 0.0, **extra}


def test_write_then_read_back_is_self_verification_and_counts_everything():
    traj = trajectory({"calls": [("write_file", {"path": "/app/a.txt", "content": "hi"})]},
                      {"results": ["wrote 2 characters to /app/a.txt"],
                       "calls": [("shell", {"command": "cat /app/a.txt"})]},
                      {"results": ["exit code 0\nhi"], "calls": [("finish", {})]})
    b = analyse(traj, result())
    assert (b.turns, b.tool_calls, b.tokens_in, b.tokens_out) == (3, 3, 300, 30)
    assert b.by_tool == {"write_file": 1, "shell": 1, "finish": 1}
    assert b.by_kind == {"write": 1, "read": 1, "finish": 1}
    assert b.self_verified is True and b.tool_coverage == 0.75
    assert b.errors == 0 and b.error_recovery is None and b.premature_finish is False and not b.loop


def test_writing_last_and_finishing_is_not_self_verification():
    traj = trajectory({"calls": [("shell", {"command": "ls /app"})]},
                      {"results": ["exit code 0\n"], "calls": [("write_file", {"path": "/app/a", "content": "x"})]},
                      {"results": ["wrote 1 characters to /app/a"], "calls": [("finish", {})]})
    assert analyse(traj, result()).self_verified is False


def test_without_a_write_self_verification_is_undefined():
    traj = trajectory({"calls": [("shell", {"command": "ls"})]}, {"results": ["exit code 0\n"], "text": "done"})
    assert analyse(traj, result()).self_verified is None


def test_a_compound_command_that_writes_then_reads_verifies_itself():
    assert shell_kinds("echo hi > /app/a.txt && cat /app/a.txt") == (["write", "read"], "/app/a.txt")
    traj = trajectory({"calls": [("shell", {"command": "echo hi > /app/a.txt && cat /app/a.txt"})]},
                      {"results": ["exit code 0\nhi"], "text": "done"})
    assert analyse(traj, result()).self_verified is True


def test_a_failed_call_retried_with_success_is_recovered():
    traj = trajectory({"calls": [("shell", {"command": "python3 /app/run.py"})]},
                      {"results": ["exit code 1\nTraceback (most recent call last):\n ..."],
                       "calls": [("write_file", {"path": "/app/run.py", "content": "print(1)"})]},
                      {"results": ["wrote 8 characters to /app/run.py"],
                       "calls": [("shell", {"command": "python3 /app/run.py --fixed"})]},
                      {"results": ["exit code 0\n1"], "calls": [("finish", {})]})
    b = analyse(traj, result())
    assert (b.errors, b.recovered, b.error_recovery) == (1, 1, 1.0)


def test_a_failure_never_fixed_is_not_recovered_and_a_timeout_has_no_recovery_rate():
    traj = trajectory({"calls": [("read_file", {"path": "/app/missing"})]},
                      {"results": ["error: [Errno 2] No such file or directory: '/app/missing'"],
                       "calls": [("read_file", {"path": "/app/other"})]},
                      {"results": ["contents"], "text": "giving up"})
    b = analyse(traj, result("failure"))
    assert (b.errors, b.recovered, b.error_recovery, b.premature_finish) == (1, 0, 0.0, True)
    assert analyse(traj, result("agent_timeout", exit_code=None)).error_recovery is None


def test_the_same_call_three_times_in_a_row_is_a_loop():
    turn = {"calls": [("shell", {"command": "ls /app"})], "results": ["exit code 0\n"]}
    b = analyse(trajectory(*[turn] * 4), result("agent_timeout", exit_code=None))
    assert (b.repeated_calls, b.loop, b.premature_finish) == (3, True, None)
    two = analyse(trajectory(turn, turn, {"calls": [("shell", {"command": "pwd"})]}), result())
    assert (two.repeated_calls, two.loop) == (1, False)


@pytest.mark.parametrize("checks, expected", [
    ({"a": {"reward": 1.0}, "b": {"reward": 0.0}, "c": {"reward": 1.0}, "d": {"reward": 0.5}}, 0.5),
    ({"created": 1.0, "content": 1}, 1.0),
    ({"only": 1.0}, None),          # one check: no plan to complete
])
def test_plan_completion_is_the_share_of_checks_fully_met(checks: dict, expected: float | None):
    assert analyse(None, result(metrics={"checks": checks})).plan_completion == expected


def test_needed_coverage_counts_action_kinds_whatever_the_harness_calls_its_tools():
    claude = ["Bash", "Write", "Edit", "Read", "Glob", "Grep", "TodoWrite"]
    traj = trajectory({"calls": [("Write", {"file_path": "/app/x.py", "content": "x"})]},
                      {"results": ["File created"], "calls": [("Bash", {"command": "python -m pytest -q"})]},
                      {"results": ["1 passed"], "text": "done"}, offered=claude)
    b = analyse(traj, result(), needed=["write", "test", "search"])
    assert b.by_kind == {"write": 1, "test": 1} and b.needed_coverage == pytest.approx(2 / 3)
    assert b.tool_coverage == pytest.approx(2 / 7) and b.self_verified is True


@pytest.mark.parametrize("tool, args, kinds, target", [
    ("exec_command", {"cmd": "sed -i 's/a/b/' /app/x.py"}, ["write"], "/app/x.py"),       # codex
    ("apply_patch", "*** Begin Patch\n*** Update File: /app/x.py\n@@\n-a\n+b\n*** End Patch", ["write"], "/app/x.py"),
    ("shell", {"command": ["bash", "-lc", "grep -rn TODO /app"]}, ["search"], "/app"),     # codex, older
    ("Edit", {"file_path": "/app/x.py", "old_string": "a", "new_string": "b"}, ["write"], "/app/x.py"),  # claude
    ("Read", {"file_path": "/app/x.py"}, ["read"], "/app/x.py"),
    ("Glob", {"pattern": "**/*.py"}, ["list"], "**/*.py"),
    ("edit", {"filePath": "/app/x.py"}, ["write"], "/app/x.py"),                           # opencode
    ("bash", {"command": "pytest -q tests/"}, ["test"], "pytest"),                         # opencode / mini
    ("exec", {"command": "ls -la /app | head"}, ["list", "read"], "/app"),                 # openclaw
    ("write", {"path": "notes.md", "content": "x"}, ["write"], "notes.md"),
    ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}, ["finish"], ""),   # mini-swe-agent
    ("click", {"selector": "#save"}, ["browse"], "#save"),                                 # browser agent
    ("goto", {"url": "/orders"}, ["observe"], "/orders"),
    ("done", {}, ["finish"], ""),
    ("TodoWrite", {"todos": []}, ["plan"], ""),
])
def test_each_harness_tool_maps_to_its_kind(tool: str, args: Any, kinds: list[str], target: str):
    [action] = actions(trajectory({"calls": [(tool, args)]})["calls"])
    assert (action.kinds, action.target) == (kinds, target)


def test_a_text_only_harness_s_bash_block_is_its_action():
    traj = trajectory({"text": "I will look.\n```bash\ncat /app/a.txt\n```"}, {"results": [], "text": "ok"})
    [action] = actions(traj["calls"])
    assert action.tool == "bash" and action.kinds == ["read"]


@pytest.mark.parametrize("text, failed", [
    ("exit code 0\nall good", False),
    ("exit code 2\nusage: ...", True),
    ("Process exited with code 1\nOutput:\n", True),                  # codex
    ("<returncode>127</returncode>\n<output>bash: foo: command not found", True),  # mini-swe-agent
    ("Traceback (most recent call last):\n  File ...\nValueError: bad", True),
    ("error: [Errno 13] Permission denied: '/etc/x'", True),
    ("wrote 12 characters to /app/a", False),
    ("The file /app/a.py has been updated.", False),
    ("exit code 0\nTraceback (most recent call last):\n", True),       # the program ran and crashed, caught inside
])
def test_error_results_are_recognised(text: str, failed: bool):
    assert is_error(text) is failed


def test_aggregate_averages_where_defined_and_sums_counts():
    rows = [Behaviour("a", "t", "react", "success", turns=2, tool_calls=3, by_tool={"shell": 3},
                      self_verified=True, errors=1, recovered=1, error_recovery=1.0),
            Behaviour("b", "t", "react", "failure", turns=4, tool_calls=1, by_tool={"shell": 1},
                      self_verified=None, premature_finish=True, loop=True)]
    agg = aggregate(rows)
    assert agg["rollouts"] == 2 and agg["turns"] == 3.0 and agg["self_verified"] == 1.0
    assert agg["error_recovery"] == 1.0 and agg["premature_finish"] == 1.0 and agg["loop"] == 0.5
    assert agg["by_tool"] == {"shell": 4} and (agg["errors"], agg["recovered"]) == (1, 1)


def test_every_metric_has_a_written_definition():
    reported = {"turns", "tokens_in", "tokens_out", "tool_calls", "tool_coverage", "needed_coverage",
                "self_verified", "errors", "recovered", "error_recovery", "plan_completion",
                "premature_finish", "repeated_calls", "loop"}
    assert reported <= set(DEFINITIONS) and all(len(text) > 20 for text in DEFINITIONS.values())
