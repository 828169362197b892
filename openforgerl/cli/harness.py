"""forge harness: install and list harness CLIs (every name in the harness table, plugins included)."""

from __future__ import annotations

from pathlib import Path

import click

from openforgerl.cli import cli


@cli.group()
def harness() -> None:
    """Harnesses: the agent CLIs rollouts run, and their installs in the tools dir."""


@harness.command("install")
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Install every harness that has a package.")
def install_cmd(names: tuple[str, ...], all_: bool) -> None:
    """Install harness CLIs into the tools dir; each runs offline once installed."""
    from openforgerl.rollout.harnesses.install import catalog, get_package, install

    chosen = list(catalog()) if all_ else list(names)
    if not chosen:
        raise click.UsageError(f"name at least one harness ({', '.join(catalog())}) or pass --all")
    for name in chosen:
        get_package(name)  # unknown names fail before anything is downloaded
    for name in chosen:
        record = install(name, lambda a: click.echo(f"{a.did}\n  undo: {a.undo}"))
        click.echo(f"{name}: {record.version} ({record.launcher})")


@harness.command("list")
def list_cmd() -> None:
    """Known harnesses and whether each is installed."""
    from openforgerl.rollout.harnesses import HARNESSES
    from openforgerl.rollout.harnesses.install import catalog, installed

    packages, done = catalog(), installed()
    for name in HARNESSES.names():
        if name not in packages:
            click.echo(f"{name:15} {'-':40} nothing to install")
            continue
        state = f"installed {done[name].version} -> {done[name].launcher}" if name in done else "not installed"
        if name in done and packages[name].compile_cache:
            state += (" (with its Node compile cache)" if done[name].compile_cache else
                      f" (no compile cache: its warm-up turn failed at install; to retry: rm -rf "
                      f"{Path(done[name].launcher).parent.parent / name} && forge harness install {name})")
        click.echo(f"{name:15} {packages[name].package:40} {state}")
