"""What ``forge synth`` shows: a bar per stage while it runs, then the funnel, the top rejections and the paths."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforgerl.synth.candidate import STAGES, Candidate
from openforgerl.synth.pipeline import SynthConfig, Synthesizer


async def synth_with_progress(config: SynthConfig) -> None:
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bars = {name: progress.add_task(name, total=None) for name in ("proposed", "filtered", "kept", "built")}
        progress.update(bars["kept"], total=config.n)

        def on_event(event: str, candidate: Candidate) -> None:
            if event == "proposed":
                progress.advance(bars["proposed"])
            elif event in ("kept", "rejected") and STAGES.index(candidate.stage) >= STAGES.index("dry_run"):
                progress.advance(bars["filtered"])
            if event == "kept":
                progress.advance(bars["kept"])
            if event == "built" and candidate.decision == "kept":
                progress.advance(bars["built"])

        synthesizer = Synthesizer(config, on_event)
        result = await synthesizer.run()
    report = result.report
    console.print(funnel_table(report))
    if report["rejections"]:
        console.print(rejections_table(report))
    console.print(f"{report['kept']} task(s) kept of {report['funnel']['overall']['proposed']} proposed: "
                  f"{result.out / 'tasks'}")
    console.print(f"report: {result.out / 'synth_report.json'}; candidates: {result.out / 'candidates.jsonl'}")
    if result.manifest:
        console.print(f"manifest of published images: {result.manifest}")


def funnel_table(report: dict[str, Any]) -> Table:
    """Proposed, kept, and the stages that dropped something (the others add only width)."""
    overall = report["funnel"]["overall"]
    built = report["run"]["config"].get("build", True)
    ordered = [s for s in STAGES if s != "calibrate" and (built or s != "build")]
    stages = [s for before, s in zip(["proposed", *ordered], ordered, strict=False)
              if s == "proposed" or overall[s] < overall[before]]
    table = Table(title="synthesis funnel (candidates that passed each stage; stages that dropped none left out)")
    table.add_column("family", no_wrap=True)
    for stage in stages:
        table.add_column(stage, justify="right")
    table.add_column("kept", justify="right", style="green")
    for family, counts in report["funnel"]["by_family"].items():
        table.add_row(family, *(str(counts[s]) for s in stages), str(counts["kept"]))
    table.add_row("[bold]all", *(f"[bold]{overall[s]}" for s in stages), f"[bold]{report['kept']}")
    return table


def rejections_table(report: dict[str, Any]) -> Table:
    table = Table(title="why candidates were rejected")
    for column in ("reason", "count", "example"):
        table.add_column(column)
    for code, entry in list(report["rejections"].items())[:10]:
        example = entry["examples"][0]
        table.add_row(code, str(entry["count"]), f"{example['id']}: {example['reason']}"[:110])
    return table
