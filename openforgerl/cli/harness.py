"""forge harness: install and list harness CLIs."""

from __future__ import annotations

import click

from openforgerl.cli import cli


@cli.group()
def harness() -> None:
    """Harness CLIs (Codex, Claude Code, opencode, OpenClaw, mini-swe-agent)."""


@harness.command("install")
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Install every known harness.")
def install_cmd(names: tuple[str, ...], all_: bool) -> None:
    """Install harness CLIs into the tools dir; each runs offline once installed."""
    from openforgerl.rollout.harnesses.install import CATALOG, get_package, install

    chosen = list(CATALOG) if all_ else list(names)
    if not chosen:
        raise click.UsageError(f"name at least one harness ({', '.join(CATALOG)}) or pass --all")
    for name in chosen:
        get_package(name)  # unknown names fail before anything is downloaded
    for name in chosen:
        record = install(name, lambda a: click.echo(f"{a.did}\n  undo: {a.undo}"))
        click.echo(f"{name}: {record.version} ({record.launcher})")


@harness.command("list")
def list_cmd() -> None:
    """Known harnesses and whether each is installed."""
    from openforgerl.rollout.harnesses.install import CATALOG, installed

    done = installed()
    for name, spec in CATALOG.items():
        state = f"installed {done[name].version} -> {done[name].launcher}" if name in done else "not installed"
        click.echo(f"{name:15} {spec.package:40} {state}")
