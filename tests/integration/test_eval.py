"""forge eval end to end: real Docker, the real react harness and oracle, the in-run proxy (scripted engine).

What a researcher reads: the terminal table, eval.json's pass@k / pass^k per task and harness, the
behaviour the react agent showed (from the proxy's digests of its real calls), the cost breakdown.
The scripted engine answers calls in the order they come, so the run is sequential (concurrency 1):
each rollout then gets the whole script.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import forge_cli

from openforgerl.testing.tasks import write_task

pytestmark = pytest.mark.docker

TEST_SH = """#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = hi ]; then r=1; else r=0; fi
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
WRITE = {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "hi"}}]}
CHECK = {"tool_calls": [{"name": "shell", "arguments": {"command": "cat /app/hello.txt"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_two_harnesses_scored_with_pass_at_k_behaviour_and_cost(tmp_path: Path):
    tasks = [write_task(tmp_path / "tasks", name, test_sh=TEST_SH,
                        tables={"task": {"needed_actions": ["write", "read"]}}) for name in ("one", "two")]
    config = {"tasks": [str(t) for t in tasks], "harnesses": ["react", "oracle"], "attempts": 2, "ks": [1, 2],
              "concurrency": 1, "proxy": {"engine": {"type": "scripted", "turns": [WRITE, CHECK, FINISH]}}}
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config))
    done = forge_cli("eval", "--config", str(tmp_path / "eval.yaml"), "--run-dir", str(tmp_path / "ev"), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pass@2" in done.stderr and "pass^2" in done.stderr and "forge report" in done.stderr

    evaluation = json.loads((tmp_path / "ev" / "eval.json").read_text())
    react = evaluation["harnesses"]["react"]
    want = {"pass@1": 1.0, "pass@2": 1.0, "pass^2": 1.0, "n": 4, "tasks": 2}
    assert {key: react["overall"][key] for key in want} == want
    assert evaluation["harnesses"]["oracle"]["tasks"]["one"]["pass^2"] == 1.0
    behaviour = evaluation["behaviour"]["react"]
    assert behaviour["turns"] == 3.0 and behaviour["by_tool"] == {"write_file": 4, "shell": 4, "finish": 4}
    assert behaviour["self_verified"] == 1.0 and behaviour["needed_coverage"] == 1.0
    assert behaviour["tool_coverage"] == 0.75 and behaviour["premature_finish"] == 0.0
    cost = evaluation["cost"]["react"]
    assert cost["rollouts"] == 4 and cost["calls"] == 12 and cost["tokens"]["tokens_out"] > 0
    assert cost["seconds"]["container_start"] > 0 and abs(sum(cost["share"].values()) - 1) < 0.01
