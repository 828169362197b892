"""``manifest.jsonl``: the contract between build-env and everything that runs tasks.

build-env appends one line per published task (``task``, ``path``, ``image`` pinned by digest,
``validation``, ``date``); rollout, eval and train read it to find ready environments.
Invariant: a task published twice appears twice and the last line wins; a task whose task.toml no
longer pins the manifest's image is refused, never run against a stale image.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openforgerl.errors import UserError
from openforgerl.tasks import Task


def append_manifest(manifest: Path, entry: dict[str, Any]) -> None:
    manifest.parent.mkdir(parents=True, exist_ok=True)
    with manifest.open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def read_manifest(manifest: Path) -> list[dict[str, Any]]:
    """Every entry; a task published twice appears twice, the last line wins."""
    if not manifest.is_file():
        return []
    entries = []
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{manifest}:{number}: not JSON ({exc})", fix="remove or repair that line") from exc
        if not isinstance(entry, dict) or not {"task", "path", "image"} <= entry.keys():
            raise UserError(f"{manifest}:{number}: an entry needs task, path and image",
                            fix="remove that line, or rerun forge build-env on its task")
        entries.append(entry)
    return entries


def published_tasks(manifest: Path) -> list[Path]:
    """The task directories a manifest publishes, each checked to still pin its published image."""
    return [task.path for task, _ in published(manifest)]


def published(manifest: Path) -> list[tuple[Task, str]]:
    """(task, published image) for each task of a manifest (its latest entry), each checked to still pin
    that image."""
    latest = {entry["task"]: entry for entry in read_manifest(manifest)}
    pairs = []
    for entry in latest.values():
        task = Task.load(entry["path"])
        if task.config.environment.docker_image != entry["image"]:
            raise UserError(f"{manifest}: task {entry['task']}: task.toml pins {task.config.environment.docker_image}, "
                            f"the manifest {entry['image']}", fix="rerun forge build-env on that task")
        pairs.append((task, entry["image"]))
    return pairs
