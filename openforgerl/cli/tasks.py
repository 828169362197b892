"""forge tasks: check task directories."""

from __future__ import annotations

import sys

import click

from openforgerl.cli import cli


@cli.group()
def tasks() -> None:
    """Work with task directories (Harbor-compatible)."""


@tasks.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def validate(paths: tuple[str, ...]) -> None:
    """Report every problem in each task directory (or directory of task directories)."""
    from openforgerl.tasks import find_task_dirs, validate_task_dir

    dirs = find_task_dirs(list(paths))
    bad = 0
    for task_dir in dirs:
        problems = validate_task_dir(task_dir)
        if problems:
            bad += 1
            for problem in problems:
                click.echo(problem)
    click.echo(f"{len(dirs) - bad} of {len(dirs)} task(s) valid", err=True)
    if bad:
        sys.exit(1)
