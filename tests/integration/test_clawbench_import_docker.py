"""Imported PinchBench-format tasks end to end: real Docker build, nop-only validation, real rollouts.

The tasks are our own format-faithful files (tests/data/clawbench); the only stand-in is the policy
(the proxy's scripted engine). The verifier reads the transcript the orchestrator wrote from the
proxy's record, inside the container.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path

import pytest

from openforgerl.envs.baselines import NO_ORACLE
from openforgerl.envs.build import BuildEnvConfig, build_envs
from openforgerl.envs.clawbench import import_clawbench
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts

pytestmark = pytest.mark.docker

DATA = Path(__file__).resolve().parents[1] / "data" / "clawbench"
WRITE = {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/greeting.txt",
                                                             "content": "hello clawbench"}}]}
TOTALS = {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/totals.json",
                                                              "content": '{"north": 170, "south": 45, "west": 0}'}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}


def test_an_imported_task_validates_with_nop_only_and_grades_what_the_proxy_recorded(tmp_path: Path):
    names = ("task_01_greeting_file", "task_02_csv_totals")
    records = [import_clawbench(DATA / "tasks" / f"{n}.md", tmp_path / "tasks", assets=DATA / "assets")[0]
               for n in names]
    assert all(r.error is None for r in records), [r.error for r in records]
    greeting, totals = (r.target for r in records)

    config = BuildEnvConfig(tasks=[str(tmp_path / "tasks")], push=False, repeats=1, out_dir=str(tmp_path / "build"),
                            manifest=str(tmp_path / "manifest.jsonl"))
    report = asyncio.run(build_envs(config))
    assert [o.passed for o in report.outcomes] == [True, True], [o.reason for o in report.outcomes]
    for task in (greeting, totals):
        validation = tomllib.loads((task / "task.toml").read_text())["validation"]
        assert validation["nop_rewards"] == [0.0] and validation["oracle_rewards"] == []
        assert validation["passed"] is True and validation["reason"] == NO_ORACLE

    nop = RolloutConfig(tasks=[str(greeting), str(totals)], harness="nop", run_dir=str(tmp_path / "nop"),
                        concurrency=2)
    _, results = asyncio.run(run_rollouts(nop))
    assert sorted((r.task, r.status, r.reward) for r in results) == \
        [(names[0], "failure", 0.0), (names[1], "failure", 0.0)]

    # One script for both, one rollout at a time (the scripted engine's turns are shared): each grader
    # looks only at its own file, and task_02's inputs come from the image.
    scripted = RolloutConfig(tasks=[str(greeting), str(totals)], harness="react", run_dir=str(tmp_path / "react"),
                             concurrency=1, proxy=ProxySettings(engine={"type": "scripted",
                                                                        "turns": [WRITE, TOTALS, FINISH]}))
    run_dir, results = asyncio.run(run_rollouts(scripted))
    assert sorted((r.task, r.status, r.reward) for r in results) == \
        [(names[0], "success", 1.0), (names[1], "success", 1.0)], [r.reason for r in results]
    result = next(r for r in results if r.task == names[0])
    assert result.metrics["checks"] == {"file_exists": 1.0, "content_exact": 1.0, "written_by_tool": 1.0}
    transcript = (run_dir / "logs" / result.rollout_id / "logs" / "verifier" / "transcript.jsonl").read_text()
    events = [json.loads(line) for line in transcript.splitlines()]
    assert events[0]["type"] == "session" and any(
        block.get("type") == "toolCall" and block["name"] == "write_file"
        for event in events[1:] for block in event["message"]["content"])
