"""What a run warns about before any sandbox starts."""

from __future__ import annotations

from pathlib import Path

from openforgerl.rollout.orchestrator import RolloutConfig, memory_room
from openforgerl.rollout.run import PreparedRun
from openforgerl.tasks import Task
from openforgerl.testing.harnesses import ShellHarness
from openforgerl.testing.tasks import write_task


def prepared(tmp_path: Path, harness: ShellHarness) -> PreparedRun:
    tasks = [Task.load(write_task(tmp_path, name, environment=env)) for name, env in
             [("small", {"memory_mb": 64}), ("roomy", {"memory_mb": 512}), ("unlimited", None)]]
    return PreparedRun(RolloutConfig(tasks=[str(tmp_path)]), tasks, harness, runtime=None, reach={})  # type: ignore[arg-type]


def test_tasks_giving_the_harness_less_memory_than_it_needs_are_named_with_the_fix(tmp_path: Path):
    assert prepared(tmp_path, ShellHarness("true", memory_mb=128)).warnings() == [
        "1 task(s) (small) set [environment] memory_mb under the 128 MB the shell harness needs: a rollout whose "
        "harness is OOM-killed there is an infra error, discarded; raise memory_mb in their task.toml"]
    assert prepared(tmp_path, ShellHarness("true", memory_mb=64)).warnings() == []
    assert prepared(tmp_path, ShellHarness("true")).warnings() == []  # a harness that declares nothing


def test_the_room_for_the_harness_is_what_the_environment_leaves_of_the_limit(tmp_path: Path):
    task = Task.load(write_task(tmp_path, "services", environment={"memory_mb": 512}))
    harness = ShellHarness("true", memory_mb=256)
    assert [memory_room(harness, task, at_rest) for at_rest in (0, 256, 256.5)] == [True, True, False]
    assert memory_room(ShellHarness("true"), task, 500) is None  # a need not declared: not known either way
