"""What ``forge build-env`` shows: one progress line per task while it runs, an outcome table at the end.

Invariant: the table has one row per task with its outcome and the reason it failed; the full
report (every round, every reward, every repair) is the JSON file whose path is printed under it.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforgerl.envs.build import BuildEnvConfig, BuildEvent, BuildReport, build_envs
from openforgerl.tasks import find_task_dirs


async def build_with_progress(config: BuildEnvConfig) -> BuildReport:
    console = Console(stderr=True)
    total = len(find_task_dirs(list(config.tasks)))
    with Progress(TextColumn("[bold]build-env"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task("", total=total)

        def on_progress(event: BuildEvent) -> None:
            progress.update(bar, advance=1 if event.done else 0, description=f"{event.task}: {event}")

        report = await build_envs(config, on_progress)
    console.print(outcome_table(report))
    console.print(f"{sum(o.passed for o in report.outcomes)} of {len(report.outcomes)} task(s) passed, "
                  f"{sum(o.builds for o in report.outcomes)} image build(s), {report.seconds:.0f} s; "
                  f"report: {report.out_dir / 'build_report.json'}; manifest: {report.manifest}")
    return report


def outcome_table(report: BuildReport) -> Table:
    table = Table(title="build-env", show_lines=False)
    for column in ("task", "outcome", "stage", "rounds", "nop", "oracle", "image"):
        table.add_column(column, overflow="fold")
    table.add_column("reason", overflow="fold", ratio=1)
    for outcome in report.outcomes:
        last = outcome.rounds[-1] if outcome.rounds else None
        table.add_row(outcome.task, "[green]passed" if outcome.passed else "[red]failed", outcome.stage,
                      str(len(outcome.rounds)), _rewards(last.nop_rewards if last else []),
                      _rewards(last.oracle_rewards if last else []),
                      _short_image(outcome.image_digest or outcome.image), outcome.reason or "")
    return table


def _short_image(image: str | None) -> str:
    if not image:
        return "-"
    name = image.rsplit("/", 1)[-1]
    return name[:name.index("@") + 19] if "@sha256:" in name else name


def _rewards(rewards: list[float | None]) -> str:
    return " ".join("-" if r is None else f"{r:g}" for r in rewards) or "-"
