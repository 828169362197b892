"""forge tasks import-clawbench: PinchBench / QwenClawBench task files -> claw task directories.

The task files under tests/data/clawbench are our own, written in the benchmarks' format (front
matter + sections, inline and asset workspace files, one task per grading type). A real checkout is
imported too when FORGE_CLAWBENCH_DIR points at its tasks/ folder.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from openforgerl.envs import baselines
from openforgerl.envs.clawbench import JudgeSettings, import_clawbench, judge_settings
from openforgerl.envs.render import render_environment
from openforgerl.errors import UserError
from openforgerl.rollout.run import run_rollouts
from openforgerl.tasks import Task, validate_task_dir
from openforgerl.testing.runtime import FakeRuntime, Scenario, reward
from openforgerl.testing.tasks import write_task

DATA = Path(__file__).resolve().parents[2] / "data" / "clawbench"
JUDGE = JudgeSettings(base_url="http://127.0.0.1:9/v1", model="judge-7b", votes=3)
GOOD = (DATA / "tasks" / "task_01_greeting_file.md").read_text()


def imported(tmp_path: Path, **kw) -> dict[str, object]:
    records = import_clawbench(DATA / "tasks", tmp_path / "out", **kw)
    return {r.source.name: r for r in records}


def toml(task_dir: Path) -> dict:
    return tomllib.loads((task_dir / "task.toml").read_text())


def test_every_task_file_becomes_a_valid_claw_task_with_the_benchmark_s_settings(tmp_path: Path):
    records = imported(tmp_path, judge=JUDGE)
    assert all(r.error is None for r in records.values()), [r.error for r in records.values()]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["task_01_greeting_file", "task_02_csv_totals", "task_03_incident_summary", "task_04_haiku"]
    for record in records.values():
        assert validate_task_dir(record.target) == []
    task = Task.load(tmp_path / "out" / "task_03_incident_summary")
    assert task.name == "task_03_incident_summary" and task.domain == "claw"
    assert task.config.agent.timeout_sec == 180 and task.config.verifier.transcript is True
    assert task.config.environment.template == "claw" and not (task.path / "solution").exists()
    assert task.instruction.startswith("Read `logs/app.log` and write `summary.md`")
    data = toml(task.path)
    assert data["metadata"]["benchmark"] == "pinchbench" and data["metadata"]["grading_type"] == "hybrid"
    assert data["metadata"]["scoring"] == "(0.6 * automated + 0.4 * judge) / 1"
    source = DATA / "tasks" / "task_03_incident_summary.md"
    assert data["provenance"]["sources"] == [{"path": "tasks/task_03_incident_summary.md",
                                              "sha256": hashlib.sha256(source.read_bytes()).hexdigest()}]
    settings = json.loads((task.tests_dir / "clawbench.json").read_text())
    assert settings["weights"] == {"automated": 0.6, "llm_judge": 0.4} and settings["judge_gate"] is None
    assert settings["judge"]["model"] == "judge-7b" and settings["workspace"] == "/app"
    assert "def grade(transcript: list, workspace_path: str) -> dict:" in (task.tests_dir / "grade.py").read_text()
    rubric = (task.tests_dir / "judge.md").read_text()
    assert "Criterion 2: Follow-up" in rubric and "root cause" in rubric  # the rubric and the expected behaviour
    test_sh = task.tests_dir / "test.sh"
    assert os.access(test_sh, os.X_OK) and "forge_clawbench.py" in test_sh.read_text()


def test_workspace_files_inline_and_from_assets_land_in_the_agent_s_workspace(tmp_path: Path):
    target = imported(tmp_path)["task_02_csv_totals.md"].target
    files = target / "environment" / "files"  # the claw template copies these to /app
    assets = DATA / "assets"
    assert (files / "data" / "sales.csv").read_bytes() == (assets / "task_02_csv_totals" / "sales.csv").read_bytes()
    assert (files / "data" / "regions.txt").read_bytes() == (assets / "regions.txt").read_bytes()
    assert (files / "notes" / "README.txt").read_text().startswith("Amounts in data/sales.csv are in whole euros.")
    sources = [s["path"] for s in toml(target)["provenance"]["sources"]]
    assert sources == ["tasks/task_02_csv_totals.md", "assets/regions.txt", "assets/task_02_csv_totals/sales.csv"]
    provided = json.loads((target / "tests" / "clawbench.json").read_text())["provided_files"]
    assert sorted(provided) == ["data/regions.txt", "data/sales.csv", "notes/README.txt"]
    assert render_environment(target)
    assert "COPY --chown=agent:agent files/ /app/" in (target / "environment" / "Dockerfile").read_text()


def test_without_a_judge_llm_judge_tasks_are_skipped_and_hybrid_ones_say_they_score_automated_only(tmp_path: Path):
    records = imported(tmp_path)
    haiku = records["task_04_haiku.md"]
    assert haiku.target is None and "llm_judge needs a judge" in haiku.error and "--judge-model" in haiku.error
    hybrid = records["task_03_incident_summary.md"]
    assert hybrid.error is None and any("automated part only" in note for note in hybrid.notes)
    assert toml(hybrid.target)["metadata"]["scoring"].startswith("automated part only")
    assert json.loads((hybrid.target / "tests" / "clawbench.json").read_text())["judge"] is None


def test_qwenclawbench_is_recognised_and_its_gate_recorded(tmp_path: Path):
    flagged = tmp_path / "bench" / "tasks"
    flagged.mkdir(parents=True)
    text = (DATA / "tasks" / "task_03_incident_summary.md").read_text()
    (flagged / "task_03_incident_summary.md").write_text(text.replace("category: operations\n",
                                                                      "category: operations\nsubcategory: logs\n"))
    [record] = import_clawbench(flagged, tmp_path / "out", judge=JUDGE)
    settings = json.loads((record.target / "tests" / "clawbench.json").read_text())
    assert settings["benchmark"] == "qwenclawbench" and settings["judge_gate"] == 0.75
    assert toml(record.target)["metadata"]["scoring"].endswith("judge counted as 0 when automated < 0.75 "
                                                               "(qwenclawbench)")
    [again] = import_clawbench(DATA / "tasks" / "task_03_incident_summary.md", tmp_path / "again", judge=JUDGE,
                               benchmark="qwenclawbench")
    assert json.loads((again.target / "tests" / "clawbench.json").read_text())["judge_gate"] == 0.75


BROKEN = {
    "no front matter": ("## Prompt\n\nhi\n", "front matter: none"),
    "bad yaml": (GOOD.replace("name: Greeting File", "name: [oops"), "front matter: not valid YAML (line"),
    "no id": (GOOD.replace("id: task_01_greeting_file\n", ""), "id: None is not a task id"),
    "path-like id": (GOOD.replace("id: task_01_greeting_file", "id: ../up"), "id: '../up' is not a task id"),
    "grading type": (GOOD.replace("grading_type: automated", "grading_type: vibes"), "grading_type: 'vibes'"),
    "timeout": (GOOD.replace("timeout_seconds: 60", "timeout_seconds: -5"), "timeout_seconds: -5"),
    "weights": (GOOD.replace("workspace_files: []", "grading_weights:\n  automated: lots\nworkspace_files: []"),
                "grading_weights.automated: 'lots'"),
    "bare file name": (GOOD.replace("workspace_files: []", "workspace_files:\n  - sum.py"),
                       "workspace_files[0]: 'sum.py' is neither"),
    "escaping dest": (GOOD.replace("workspace_files: []", "workspace_files:\n  - path: ../x\n    content: hi"),
                      "workspace_files[0].path: '../x' is not a path inside the workspace"),
    "missing asset": (GOOD.replace("workspace_files: []", "workspace_files:\n  - source: nope.csv\n    dest: a.csv"),
                      "workspace_files[0].source: 'nope.csv' is not in"),
    "no prompt": (GOOD.replace("## Prompt", "## Ask"), "## Prompt: missing or empty"),
    "no python block": (GOOD.replace("```python", "```"), "## Automated Checks: no ```python block"),
    "syntax error": (GOOD.replace("from pathlib import Path", "from pathlib import"),
                     "## Automated Checks: line 2 of the python block"),
    "no grade()": (GOOD.replace("def grade(", "def score("), "defines no grade() function"),
    "judge without rubric": (GOOD.replace("grading_type: automated", "grading_type: hybrid")
                             .split("## Grading Criteria")[0] + "## Automated Checks\n" + GOOD.split(
                                 "## Automated Checks")[1], "## LLM Judge Rubric: missing"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_file_not_in_the_format_is_one_line_naming_file_and_field_and_the_others_still_import(tmp_path: Path,
                                                                                                 case: str):
    text, expected = BROKEN[case]
    tasks = tmp_path / "bench" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "task_00_good.md").write_text(GOOD.replace("task_01_greeting_file", "task_00_good"))
    (tasks / "task_09_broken.md").write_text(text)
    shutil.copytree(DATA / "assets", tmp_path / "bench" / "assets")
    good, broken = import_clawbench(tasks, tmp_path / "out", judge=JUDGE)
    assert good.error is None and good.target == tmp_path / "out" / "task_00_good"
    assert broken.target is None and "\n" not in broken.error
    assert broken.error.startswith(f"{tasks / 'task_09_broken.md'}: ") and expected in broken.error, broken.error
    assert "; fix: " in broken.error
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["task_00_good"]  # nothing half-written


def test_a_grader_the_benchmark_cuts_at_an_inner_fence_is_imported_whole_with_a_note(tmp_path: Path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    fenced = GOOD.replace('    return scores\n```', '    if "```" in "x":\n        pass\n    return scores\n```')
    (tasks / "task_01_greeting_file.md").write_text(fenced)
    [record] = import_clawbench(tasks, tmp_path / "out")
    assert record.error is None and any("cuts this grader" in note for note in record.notes)
    assert (record.target / "tests" / "grade.py").read_text().rstrip().endswith("return scores")


def test_existing_tasks_are_kept_unless_overwrite_and_duplicate_ids_are_refused(tmp_path: Path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "task_01_a.md").write_text(GOOD)
    (tasks / "task_02_b.md").write_text(GOOD)  # the same id twice
    first, second = import_clawbench(tasks, tmp_path / "out")
    assert first.error is None and "is also the id of" in second.error
    [again] = import_clawbench(tasks / "task_01_a.md", tmp_path / "out")
    assert "already exists" in again.error and "--overwrite" in again.error
    [replaced] = import_clawbench(tasks / "task_01_a.md", tmp_path / "out", overwrite=True)
    assert replaced.error is None


def test_judge_flags_are_checked():
    assert judge_settings(None, None) is None
    with pytest.raises(UserError, match="--judge-url needs --judge-model"):
        judge_settings("http://127.0.0.1:8000/v1", None)
    assert judge_settings(None, "m").base_url is None  # the run's judge, through the relay
    with pytest.raises(UserError, match="base_url"):
        judge_settings("ftp://judge", "m")
    assert judge_settings("http://127.0.0.1:8000/v1/", "m", 5).base_url == "http://127.0.0.1:8000/v1"


def test_the_cli_prints_a_line_per_file_and_exits_1_when_one_was_skipped(tmp_path: Path):
    run = subprocess.run([sys.executable, "-m", "openforgerl", "tasks", "import-clawbench", str(DATA / "tasks"),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "imported task_01_greeting_file.md -> " in run.stdout and "skipped  " in run.stdout
    assert "3 of 4 task file(s) imported" in run.stderr
    judged = subprocess.run([sys.executable, "-m", "openforgerl", "tasks", "import-clawbench", str(DATA / "tasks"),
                             "--out", str(tmp_path / "judged"), "--judge-url", "http://127.0.0.1:9/v1",
                             "--judge-model", "judge-7b"], capture_output=True, text=True, timeout=120)
    assert judged.returncode == 0 and "4 of 4 task file(s) imported" in judged.stderr


def test_build_env_checks_a_task_without_a_solution_with_nop_only_and_records_no_oracle(tmp_path: Path,
                                                                                         monkeypatch):
    task = write_task(tmp_path / "tasks", "imported", solution=None)
    shutil.rmtree(task / "solution")
    harnesses = []

    async def on_fake_runtime(config, **kw):
        harnesses.append(config.harness)
        return await run_rollouts(config, runtime=FakeRuntime(Scenario(verifier=reward(0.0))))

    monkeypatch.setattr(baselines, "run_rollouts", on_fake_runtime)
    checks = asyncio.run(baselines.run_baselines(task, tmp_path / "runs", repeats=2, nop_max=0, oracle_min=1))
    assert harnesses == ["nop"] and checks.ok
    assert checks.nop.rewards == [0.0, 0.0] and checks.oracle.rewards == []
    assert checks.reason == baselines.NO_ORACLE and "validated with nop only" in checks.reason


@pytest.mark.skipif(not os.environ.get("FORGE_CLAWBENCH_DIR"),
                    reason="set FORGE_CLAWBENCH_DIR to the tasks/ folder of a PinchBench or QwenClawBench checkout")
def test_a_real_benchmark_checkout_imports(tmp_path: Path):
    source = Path(os.environ["FORGE_CLAWBENCH_DIR"])
    records = import_clawbench(source, tmp_path / "out", judge=JUDGE)
    done = [r for r in records if r.error is None]
    print(f"{len(done)} of {len(records)} imported", *(r.error for r in records if r.error), sep="\n")
    assert done, "no task of the checkout imported"
    assert all(validate_task_dir(r.target) == [] for r in done)
