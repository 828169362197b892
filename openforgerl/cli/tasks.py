"""forge tasks: check task directories."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from openforgerl.cli import cli

if TYPE_CHECKING:
    from openforgerl.tasks import Domain


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


@tasks.command("import-harbor")
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.option("--out", default="tasks", show_default=True, type=click.Path(file_okay=False),
              help="Directory the tasks are copied into.")
@click.option("--domain", type=click.Choice(["gui", "claw", "code"]),
              help="Also write [task] domain (implies --add-tables).")
@click.option("--add-tables", is_flag=True,
              help="Also write our [task] table (name); otherwise files are copied unchanged.")
@click.option("--overwrite", is_flag=True, help="Replace tasks already in --out.")
def import_harbor(source: str, out: str, domain: Domain | None, add_tables: bool, overwrite: bool) -> None:
    """Copy Harbor / Terminal-Bench task(s) from SOURCE into --out and validate them."""
    from pathlib import Path

    from openforgerl.envs.harbor import import_harbor as run_import

    moved = run_import(Path(source), Path(out), domain=domain, add_tables=add_tables, overwrite=overwrite)
    _print_moved(moved, "imported")


@tasks.command("export-harbor")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory the Harbor tasks go to.")
@click.option("--overwrite", is_flag=True, help="Replace tasks already in --out.")
def export_harbor(paths: tuple[str, ...], out: str, overwrite: bool) -> None:
    """Copy task(s) into --out in Harbor's layout (a template is rendered; loopback image pins dropped)."""
    from pathlib import Path

    from openforgerl.envs.harbor import export_harbor as run_export

    _print_moved(run_export([Path(p) for p in paths], Path(out), overwrite=overwrite), "exported")


@tasks.command("import-clawbench")
@click.argument("source", type=click.Path(exists=True))
@click.option("--out", default="tasks", show_default=True, type=click.Path(file_okay=False),
              help="Directory the tasks are written into (one per task file, named by its id).")
@click.option("--assets", type=click.Path(exists=True, file_okay=False),
              help="The benchmark's assets directory (default: assets/ beside SOURCE).")
@click.option("--benchmark", type=click.Choice(["auto", "pinchbench", "qwenclawbench"]), default="auto",
              show_default=True, help="Whose scoring rules apply (QwenClawBench gates the judge part at 0.75).")
@click.option("--judge-model", help="The pinned LLM judge of llm_judge and hybrid tasks; alone, the verifier asks "
                                    "the run's judge (judge.base_url), relayed into the sandbox.")
@click.option("--judge-url", help="Call this OpenAI-compatible endpoint directly from the sandbox instead (it must "
                                  "be reachable from there).")
@click.option("--judge-votes", type=int, default=3, show_default=True, help="Judge verdicts per rollout.")
@click.option("--overwrite", is_flag=True, help="Replace tasks already in --out.")
def import_clawbench(source: str, out: str, assets: str | None, benchmark: str, judge_url: str | None,
                     judge_model: str | None, judge_votes: int, overwrite: bool) -> None:
    """Import PinchBench / QwenClawBench task files (task_*.md in SOURCE) as claw tasks in --out."""
    from pathlib import Path

    from openforgerl.envs.clawbench import import_clawbench as run_import
    from openforgerl.envs.clawbench import judge_settings

    judge = judge_settings(judge_url, judge_model, judge_votes)
    records = run_import(Path(source), Path(out), assets=Path(assets) if assets else None,
                         benchmark=None if benchmark == "auto" else benchmark,  # type: ignore[arg-type]
                         judge=judge, overwrite=overwrite)
    for record in records:
        if record.error:
            click.echo(f"skipped  {record.error}")
            continue
        click.echo(f"imported {record.source.name} -> {record.target} ({record.grading})")
        for note in record.notes:
            click.echo(f"  note: {note}")
    done = sum(r.error is None for r in records)
    click.echo(f"{done} of {len(records)} task file(s) imported into {out}", err=True)
    if done < len(records):
        sys.exit(1)


def _print_moved(moved, verb: str) -> None:
    bad = 0
    for record in moved:
        click.echo(f"{verb} {record.source} -> {record.target}")
        for change in record.changes:
            click.echo(f"  {change}")
        for problem in record.problems:
            click.echo(f"  problem: {problem}")
        bad += bool(record.problems)
    click.echo(f"{len(moved) - bad} of {len(moved)} task(s) {verb} and valid", err=True)
    if bad:
        sys.exit(1)
