"""forge eval on the fake runtime: one rollout run per harness, eval.json recomputable from them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.errors import ConfigError
from openforgerl.evaluation.runner import EvalConfig, run_eval, score_dir
from openforgerl.config import resolve
from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, reward
from openforgerl.testing.tasks import write_task


def passes_when_the_solution_ran():
    async def step(box, command, timeout):
        ran = any("/solution/solve.sh" in " ".join(c) for c, _, _ in box.execs)
        return await reward(1.0 if ran else 0.0)(box, command, timeout)
    return step


def test_each_harness_gets_its_own_run_and_eval_json_scores_them(tmp_path: Path):
    tasks = [write_task(tmp_path / "tasks", name) for name in ("a", "b")]
    config = EvalConfig(tasks=[str(t) for t in tasks], harnesses=["nop", "oracle"], attempts=3, ks=[1, 3],
                        run_dir=str(tmp_path / "eval"))
    runtime = FakeRuntime(Scenario(agent=exits(0), verifier=passes_when_the_solution_ran()))
    run_dir, evaluation = asyncio.run(run_eval(config, runtime=runtime))
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "eval.json", "nop", "oracle"]
    assert len((run_dir / "nop" / "rollouts.jsonl").read_text().splitlines()) == 6
    oracle, nop = evaluation["harnesses"]["oracle"], evaluation["harnesses"]["nop"]
    assert oracle["overall"]["pass@1"] == 1.0 and oracle["overall"]["pass^3"] == 1.0 and oracle["overall"]["n"] == 6
    assert nop["overall"]["pass@3"] == 0.0 and set(nop["tasks"]) == {"a", "b"}
    assert evaluation["overall"]["pass@1"] == 0.5
    assert set(evaluation["behaviour"]) == set(evaluation["cost"]) == {"nop", "oracle"}
    assert json.loads((run_dir / "eval.json").read_text())["harnesses"] == evaluation["harnesses"]
    (run_dir / "eval.json").unlink()  # recomputable from the harness runs alone
    assert score_dir(run_dir, [1, 3])["harnesses"] == evaluation["harnesses"]


def test_a_k_larger_than_the_attempts_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"pass@3 needs at least 3 attempts.*-n 3"):
        resolve(EvalConfig, None, ["attempts=2", "ks=[1,3]"], defaults={"tasks": ["x"]})


def test_per_harness_options_win_over_the_common_ones_and_each_harness_checks_its_own():
    config = EvalConfig(tasks=["x"], harnesses=["react", "nop"], harness_options_for={"react": {"max_turns": 5}})
    assert config.rollout_config("react", Path("d")).harness_options == {"max_turns": 5}
    assert config.rollout_config("nop", Path("d")).harness_options == {}
    assert config.rollout_config("react", Path("d")).run_dir == str(Path("d") / "react")
    with pytest.raises(ConfigError, match="harness_options.max_turns: not an option of harness nop"):
        resolve(EvalConfig, None, ["harnesses=[react,nop]", "harness_options.max_turns=3"], defaults={"tasks": ["x"]})
