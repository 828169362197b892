"""forge doctor, forge stack up, forge stack down.

``doctor`` never changes anything and shows every part, even one whose module fails to import;
``stack up`` prints each change the moment it is made (with its undo), so a failure half-way
leaves nothing unreported.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from openforgerl.cli import cli
from openforgerl.stack import parts as stack_parts
from openforgerl.stack.part import Action, Part, PartStatus
from openforgerl.stack.parts import STACK_UP, default_parts, load_part


def _load_status(key: str) -> Part | PartStatus:
    """The part, or a not-ready row saying why its module could not be loaded."""
    try:
        return load_part(key)
    except Exception as exc:  # any import failure (missing module, missing extra, bug) is one row
        return PartStatus(key, False, f"cannot load {stack_parts.PARTS.path(key)}: {type(exc).__name__}: {exc}",
                          fix="install the missing extra or module, then rerun forge doctor")


def _check(part: Part) -> PartStatus:
    try:
        return part.check()
    except Exception as exc:  # a crashing check is reported on its row; the other rows still show
        return PartStatus(part.name, False, f"check failed: {type(exc).__name__}: {exc}",
                          fix="report this as a bug", optional=part.optional)


def collect_statuses(keys: tuple[str, ...]) -> list[PartStatus]:
    loaded = [_load_status(key) for key in keys]
    return [item if isinstance(item, PartStatus) else _check(item) for item in loaded]


def blocking(statuses: list[PartStatus]) -> list[PartStatus]:
    """The rows that make ``doctor`` fail: required parts that are not ready."""
    return [s for s in statuses if not s.ready and not s.optional]


def status_table(statuses: list[PartStatus]) -> Table:
    table = Table(title="openforgerl local stack", title_justify="left", expand=True)
    table.add_column("part", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=3)
    table.add_column("fix", overflow="fold", ratio=2)
    for s in statuses:
        state = ("[green]ready[/]" if s.ready else
                 "[yellow]optional, not ready[/]" if s.optional else "[red]not ready[/]")
        table.add_row(s.name, state, escape(s.detail), escape(s.fix or ""))
    return table


@cli.command()
def doctor() -> None:
    """Show whether each part of the local stack is ready (changes nothing)."""
    statuses = collect_statuses(tuple(stack_parts.PARTS.names()))
    Console().print(status_table(statuses))
    if blocking(statuses):
        sys.exit(1)


@cli.group()
def stack() -> None:
    """Start and stop the local stack: Docker engine, base image, registry."""


def _with_mirror(parts: list[Part], mirror: str | None) -> list[Part]:
    for part in parts:
        if mirror and hasattr(part, "mirror"):
            part.mirror = mirror
    return parts


@stack.command("up")
@click.option("--mirror", metavar="URL", help="Debian mirror for building the base image "
              "(default: read from this machine's apt sources).")
def stack_up(mirror: str | None) -> None:
    """Make the Docker engine, base image and registry ready (idempotent)."""
    console = Console()
    parts = _with_mirror(default_parts(STACK_UP), mirror)
    changes: list[Action] = []
    for part in parts:
        def report(action: Action, name: str = part.name) -> None:
            changes.append(action)
            console.print(f"[bold]{name}[/]: {escape(action.did)}\n  undo: {escape(action.undo)}", soft_wrap=True)

        with console.status(f"{part.name}: checking and making ready"):
            part.ensure(report)
    if not changes:
        console.print(f"nothing changed: {', '.join(STACK_UP)} were already ready")
    console.print(status_table([_check(part) for part in parts]))


@stack.command("down")
def stack_down() -> None:
    """Stop the services forge started (registry, dockerd); others are left alone."""
    stopped = [line for part in reversed(default_parts(STACK_UP)) for line in part.stop()]
    for line in stopped:
        click.echo(line)
    if not stopped:
        click.echo("nothing to stop: no registry or dockerd started by forge is running "
                   "(services started some other way are left alone)")
