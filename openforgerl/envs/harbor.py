"""Moving tasks between Harbor / Terminal-Bench and openforgerl: ``forge tasks import-harbor`` / ``export-harbor``.

Both formats share one layout (task.toml, instruction.md, environment/, tests/, solution/), so a
task is copied file for file. Import validates each copy and adds our ``[task]`` table (name,
domain) only when asked. Export renders a template-only environment into environment/Dockerfile,
and drops exactly one thing: a ``docker_image`` that build-env pinned in a loopback registry
(127.0.0.1:5000/...@sha256:...), which no other machine can pull — Harbor then builds the
Dockerfile that sits beside it. Invariant: apart from those two, an exported or imported task
is byte-identical to its source, unknown tables and files included.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from openforgerl.containers.refs import is_loopback_registry
from openforgerl.envs.render import render_environment
from openforgerl.errors import UserError
from openforgerl.tasks import DOCKERFILE, TASK_TOML, Domain, Task, find_task_dirs, validate_task_dir

OURS = ("task", "provenance", "validation")


@dataclass
class Moved:
    """One task copied: where from, where to, what changed, and what is still wrong with it."""

    source: Path
    target: Path
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def harbor_task_dirs(source: Path) -> list[Path]:
    """Every task directory under ``source`` (itself, or a dataset: task dirs at any depth, e.g.
    Terminal-Bench 2's ``<task>/`` or a registry's ``<dataset>/<task>/``), never one inside another."""
    dirs = dataset_task_dirs(source)
    if dirs:
        names: dict[str, Path] = {}
        for task_dir in dirs:
            if task_dir.name in names:
                raise UserError(f"{source}: two tasks are named {task_dir.name!r} ({names[task_dir.name]} and "
                                f"{task_dir})", fix="import the two datasets into different --out directories")
            names[task_dir.name] = task_dir
        return dirs
    if (source / "task.yaml").is_file() or next(source.rglob("task.yaml"), None) is not None:
        raise UserError(f"{source}: legacy Terminal-Bench task.yaml layout",
                        fix="convert it to the Harbor layout first (Harbor's terminal-bench adapter)")
    raise UserError(f"{source}: no task directories (none holds a task.toml)",
                    fix="pass a Harbor task directory or a directory of them")


def dataset_task_dirs(source: Path) -> list[Path]:
    if (source / TASK_TOML).is_file():
        return [source]
    if not source.is_dir():
        return []
    found: list[Path] = []
    for child in sorted(source.iterdir()):
        if child.is_dir() and not child.is_symlink() and not child.name.startswith("."):
            found += dataset_task_dirs(child)
    return found


def _copy(source: Path, target: Path, overwrite: bool) -> None:
    if target.exists():
        if not overwrite:
            raise UserError(f"{target} already exists", fix="pass --overwrite or choose another --out")
        shutil.rmtree(target)
    shutil.copytree(source, target, symlinks=True)


def import_harbor(source: Path, out: Path, *, domain: Domain | None = None, add_tables: bool = False,
                  overwrite: bool = False) -> list[Moved]:
    """Copy Harbor tasks under ``out``; with ``add_tables`` (or a ``domain``) also write our [task] table."""
    moved = []
    for task_dir in harbor_task_dirs(source):
        target = out / task_dir.name
        _copy(task_dir, target, overwrite)
        record = Moved(task_dir, target)
        if add_tables or domain:
            record.changes += _add_task_table(target, domain)
        record.problems = validate_task_dir(target)
        moved.append(record)
    return moved


def _add_task_table(task_dir: Path, domain: Domain | None) -> list[str]:
    try:
        task = Task.load(task_dir)
    except UserError:
        return []  # validation reports why; the copy stays untouched
    task.config.task.name = task.config.task.name or task_dir.name
    if domain:
        task.config.task.domain = domain
    task.save()
    return [f"added [task] name = {task.name!r}" + (f", domain = {domain!r}" if domain else "")]


def export_harbor(tasks: list[Path], out: Path, *, overwrite: bool = False) -> list[Moved]:
    moved = []
    for task_dir in find_task_dirs(list(tasks)):
        target = out / task_dir.name
        _copy(task_dir, target, overwrite)
        record = Moved(task_dir, target)
        if render_environment(target):
            record.changes.append(f"rendered {DOCKERFILE} from its template")
        record.changes += _drop_loopback_pin(Task.load(target))
        record.problems = validate_task_dir(target)
        moved.append(record)
    return moved


def _drop_loopback_pin(task: Task) -> list[str]:
    image = task.config.environment.docker_image
    if not image or not is_loopback_registry(image) or not task.dockerfile.is_file():
        return []
    task.config.environment.docker_image = None
    task.save()
    return [f"dropped docker_image {image} (a loopback registry only this machine reaches; "
            f"{DOCKERFILE} builds it)"]
