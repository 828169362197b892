"""forge report: one self-contained HTML file about runs (scores, behaviour, cost, plots, every trajectory)."""

from __future__ import annotations

from pathlib import Path

import click

from openforgerl.cli import cli


def _ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give whole numbers separated by commas, e.g. 1,3") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter(f"{text!r}: every k must be 1 or more, e.g. 1,3")
    return ks


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--out", type=click.Path(dir_okay=False), help="The HTML file to write (default RUN_DIR/report.html).")
@click.option("-k", "ks", help="The k of pass@k / pass^k, comma-separated (default: eval.json's, else 1 and n).")
def report(run_dirs: tuple[str, ...], out: str | None, ks: str | None) -> None:
    """Write one HTML report of RUN_DIRS (forge rollout / forge eval directories; the first is the baseline
    each later one is compared with); print pass@1 per harness and task of each run (and the change from the
    first to the last), then the report's path."""
    from openforgerl.evaluation.report import write_report_and_summary

    path, summary = write_report_and_summary([Path(d) for d in run_dirs], Path(out) if out else None, _ks(ks))
    click.echo(summary, err=True)  # stdout holds the path alone, for scripts
    click.echo(str(path))
