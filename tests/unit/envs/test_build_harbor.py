"""Harbor import/export and recording validation results: nothing Harbor needs is lost or changed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from openforgerl.envs.publish import clear_own_pin, record_validation
from openforgerl.envs.harbor import export_harbor, import_harbor
from openforgerl.errors import UserError
from openforgerl.tasks import Task

HARBOR_TOML = """version = "1.0"

[metadata]
author_name = "someone"
difficulty = "easy"
category = "file-ops"
tags = ["files"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory = "2G"
future_field = "kept"
"""


def harbor_task(root: Path, name: str = "hello-world") -> Path:
    task = root / name
    files = {"task.toml": HARBOR_TOML, "instruction.md": "Create /app/hello.txt containing hi.\n",
             "environment/Dockerfile": "FROM openforgerl/base:bookworm\nWORKDIR /app\n",
             "tests/test.sh": "#!/bin/bash\ngrep -qx hi /app/hello.txt && echo 1 > /logs/verifier/reward.txt "
                              "|| echo 0 > /logs/verifier/reward.txt\n",
             "solution/solve.sh": "#!/bin/bash\necho hi > /app/hello.txt\n"}
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_import_copies_a_harbor_task_unchanged_and_validates_it(tmp_path: Path):
    source = harbor_task(tmp_path / "harbor")
    [moved] = import_harbor(source.parent, tmp_path / "tasks")
    assert moved.problems == [] and moved.changes == []
    assert tree(moved.target) == tree(source)


def test_a_whole_dataset_directory_imports_every_task_at_any_depth(tmp_path: Path):
    dataset = tmp_path / "terminal-bench"
    for name in ("hello-world", "fix-git"):
        harbor_task(dataset, name)
    harbor_task(dataset / "extra" / "group", "nested-task")
    (dataset / "README.md").write_text("a dataset\n")
    (dataset / ".github" / "workflows").mkdir(parents=True)
    moved = import_harbor(dataset, tmp_path / "tasks")
    assert sorted(m.target.name for m in moved) == ["fix-git", "hello-world", "nested-task"]
    assert all(m.problems == [] for m in moved)
    assert all(tree(m.target) == tree(m.source) for m in moved)


def test_two_tasks_of_one_name_in_a_dataset_are_refused_before_anything_is_copied(tmp_path: Path):
    harbor_task(tmp_path / "ds" / "a", "same")
    harbor_task(tmp_path / "ds" / "b", "same")
    with pytest.raises(UserError, match="two tasks are named 'same'"):
        import_harbor(tmp_path / "ds", tmp_path / "tasks")
    assert not (tmp_path / "tasks").exists()


def test_import_adds_our_task_table_only_when_asked(tmp_path: Path):
    source = harbor_task(tmp_path / "harbor")
    [moved] = import_harbor(source, tmp_path / "tasks", domain="claw")
    data = tomllib.loads((moved.target / "task.toml").read_text())
    assert data["task"] == {"name": "hello-world", "domain": "claw"}
    assert data["environment"]["future_field"] == "kept" and data["environment"]["memory"] == "2G"
    assert data["metadata"]["tags"] == ["files"]


def test_import_refuses_to_overwrite_and_explains_legacy_layouts(tmp_path: Path):
    source = harbor_task(tmp_path / "harbor")
    import_harbor(source, tmp_path / "tasks")
    with pytest.raises(UserError, match="already exists"):
        import_harbor(source, tmp_path / "tasks")
    legacy = tmp_path / "tb" / "old-task"
    legacy.mkdir(parents=True)
    (legacy / "task.yaml").write_text("instruction: hi\n")
    with pytest.raises(UserError, match="legacy Terminal-Bench"):
        import_harbor(legacy.parent, tmp_path / "out")


def test_export_keeps_everything_but_a_loopback_pin_and_renders_templates(tmp_path: Path):
    source = harbor_task(tmp_path / "ours")
    pin = "127.0.0.1:5000/openforgerl/task@sha256:" + "a" * 64
    record_validation(source, {"passed": True, "image_digest": pin, "rounds": 1}, pin)
    templated = harbor_task(tmp_path / "ours", "templated")
    (templated / "environment" / "Dockerfile").unlink()
    with (templated / "task.toml").open("a") as toml:
        toml.write('template = "claw"\n')
    moved = export_harbor([tmp_path / "ours"], tmp_path / "harbor")
    by_name = {m.target.name: m for m in moved}
    exported = tomllib.loads((by_name["hello-world"].target / "task.toml").read_text())
    assert "docker_image" not in exported["environment"] and exported["validation"]["passed"] is True
    assert exported["environment"]["future_field"] == "kept"
    assert "dropped docker_image" in by_name["hello-world"].changes[0]
    assert (by_name["templated"].target / "environment" / "Dockerfile").is_file()
    assert by_name["templated"].problems == []


def test_recording_keeps_unknown_fields_and_a_rebuild_clears_only_our_own_pin(tmp_path: Path):
    task_dir = harbor_task(tmp_path)
    pin = "127.0.0.1:5000/openforgerl/task@sha256:" + "b" * 64
    record_validation(task_dir, {"passed": True, "oracle_rewards": [1.0, 1.0], "image_digest": pin, "rounds": 0}, pin)
    task = Task.load(task_dir)
    assert task.config.environment.docker_image == pin and task.config.validation.rounds == 0
    clear_own_pin(task)
    data = tomllib.loads((task_dir / "task.toml").read_text())
    assert "docker_image" not in data["environment"] and data["environment"]["future_field"] == "kept"
    assert data["validation"]["oracle_rewards"] == [1.0, 1.0]


def test_the_cli_imports_then_exports_a_harbor_task_unchanged(tmp_path: Path):
    import subprocess
    import sys

    source = harbor_task(tmp_path / "harbor")

    def forge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "openforgerl", "tasks", *args], capture_output=True, text=True,
                              timeout=120)

    imported = forge("import-harbor", str(source.parent), "--out", str(tmp_path / "tasks"))
    assert imported.returncode == 0 and "1 of 1 task(s) imported and valid" in imported.stderr
    exported = forge("export-harbor", str(tmp_path / "tasks"), "--out", str(tmp_path / "back"))
    assert exported.returncode == 0, exported.stderr
    assert tree(tmp_path / "back" / "hello-world") == tree(source)
