"""What ``forge rollout`` shows: a progress bar while it runs, a summary table at the end."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforgerl.rollout.orchestrator import STATUSES, RolloutConfig, RolloutResult
from openforgerl.rollout.run import prepare_run

STYLE = {"success": "green", "failure": "yellow", "agent_timeout": "magenta", "infra_error": "red",
         "verifier_error": "red", "cancelled": "dim"}


async def run_with_progress(config: RolloutConfig) -> None:
    console = Console(stderr=True)
    prepared = await prepare_run(config)  # a broken setup fails here, before any progress is shown
    with Progress(TextColumn("[bold]rollouts"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        bar = progress.add_task("", total=prepared.rollouts)
        seen: dict[str, int] = {}

        def on_result(result: RolloutResult) -> None:
            seen[result.status] = seen.get(result.status, 0) + 1
            retried = result.status == "infra_error" and result.try_index < config.retry_infra
            progress.update(bar, advance=0 if retried else 1,
                            description=" ".join(f"{s}={n}" for s, n in seen.items()))

        run_dir, results = await prepared.execute(on_result)
    console.print(summary_table(results))
    console.print(f"run directory: {run_dir}  (rollouts.jsonl, trajectories/, logs/, summary.json)")


def summary_table(results: list[RolloutResult]) -> Table:
    table = Table(title="rollouts by task")
    table.add_column("task")
    for status in STATUSES:
        table.add_column(status, justify="right", style=STYLE[status])
    table.add_column("mean reward", justify="right")
    by_task: dict[str, list[RolloutResult]] = {}
    for result in results:
        by_task.setdefault(result.task, []).append(result)
    for task, rows in sorted(by_task.items()):
        rewards = [r.reward for r in rows if r.reward is not None and r.status != "infra_error"]
        table.add_row(task, *(str(sum(r.status == s for r in rows)) for s in STATUSES),
                      f"{sum(rewards) / len(rewards):.2f}" if rewards else "-")
    return table
