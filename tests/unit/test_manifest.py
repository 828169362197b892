"""manifest.jsonl: appended by build-env, read by rollout; a bad line is named, a stale pin refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from openforgerl.errors import UserError
from openforgerl.manifest import append_manifest, published_tasks, read_manifest
from openforgerl.tasks import Task
from openforgerl.testing.tasks import write_task

PIN = "127.0.0.1:5000/openforgerl/task@sha256:" + "a" * 64


def test_lines_are_appended_and_the_last_entry_of_a_task_wins(tmp_path: Path):
    manifest = tmp_path / "manifest.jsonl"
    first, second = write_task(tmp_path, "a"), write_task(tmp_path, "b")
    for task_dir in (first, second, first):
        task = Task.load(task_dir)
        task.config.environment.docker_image = PIN
        task.save()
        append_manifest(manifest, {"task": task_dir.name, "path": str(task_dir), "image": PIN})
    assert [e["task"] for e in read_manifest(manifest)] == ["a", "b", "a"]
    assert published_tasks(manifest) == [first, second]


def test_a_task_whose_pin_changed_since_publishing_is_refused(tmp_path: Path):
    manifest = tmp_path / "manifest.jsonl"
    task_dir = write_task(tmp_path, "a")
    append_manifest(manifest, {"task": "a", "path": str(task_dir), "image": PIN})
    with pytest.raises(UserError, match="rerun forge build-env"):
        published_tasks(manifest)


@pytest.mark.parametrize("line, what", [("{not json", "not JSON"), ('{"task": "a"}', "an entry needs task, path and image"),
                                        ("[1, 2]", "an entry needs task, path and image")])
def test_a_broken_line_is_named_with_its_number(tmp_path: Path, line: str, what: str):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(f'{{"task": "x", "path": "p", "image": "i"}}\n{line}\n')
    with pytest.raises(UserError, match=f"manifest.jsonl:2: {what}"):
        read_manifest(manifest)
