"""What ``forge eval`` shows: progress per harness, then a table of pass@k / pass^k per task and harness."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforgerl.evaluation.runner import EvalConfig, run_eval
from openforgerl.rollout.orchestrator import RolloutResult


async def eval_with_progress(config: EvalConfig) -> None:
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.fields[harness]}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as progress:
        bars: dict[str, Any] = {}

        def on_result_for(harness: str, rollouts: int):
            bars[harness] = progress.add_task("", total=rollouts, harness=harness)

            def on_result(result: RolloutResult) -> None:
                retried = result.status == "infra_error" and result.try_index < config.retry_infra
                progress.update(bars[harness], advance=0 if retried else 1)
            return on_result

        run_dir, evaluation = await run_eval(config, on_result_for)
    console.print(score_table(evaluation))
    console.print(f"eval directory: {run_dir}  (eval.json; one rollout run per harness: {', '.join(config.harnesses)})")
    console.print(f"report: forge report {run_dir}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def score_table(evaluation: dict[str, Any]) -> Table:
    """One row per (harness, task) and an overall row per harness, ClawEval style."""
    ks = evaluation["ks"]
    keys = [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks if k > 1] + ["mean_reward"]
    table = Table(title="evaluation")
    for column in ("harness", "task", "n", *keys, "infra"):
        table.add_column(column, justify="left" if column in ("harness", "task") else "right")
    for harness, entry in evaluation["harnesses"].items():
        for task, scores in entry["tasks"].items():
            table.add_row(harness, task, str(scores["n"]), *(_fmt(scores[k]) for k in keys),
                          str(scores["infra_error"] + scores["cancelled"] + scores["verifier_error"]))
        overall = entry["overall"]
        table.add_row(f"[bold]{harness}", "[bold]overall", str(overall["n"]),
                      *(f"[bold]{_fmt(overall[k])}" for k in keys),
                      str(overall["infra_error"] + overall["cancelled"] + overall["verifier_error"]), end_section=True)
    return table
