"""forge export: run directories -> token-exact SFT rows (``sft``), or only the rewarded rollouts (``rs``)."""

from __future__ import annotations

from pathlib import Path

import click

from openforgerl.cli import cli


@cli.command()
@click.argument("kind", type=click.Choice(["sft", "rs", "verl"]))
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The file to write: *.jsonl or *.parquet (parquet needs pyarrow).")
@click.option("--min-reward", type=float, default=None,
              help="Keep only rollouts with at least this reward (rs: default 1.0; sft: no threshold).")
@click.option("--harness", default="react", show_default=True,
              help="verl: the harness (comma-separated: one row per task and harness).")
def export(kind: str, run_dirs: tuple[str, ...], out: str, min_reward: float | None, harness: str) -> None:
    """Export the rollouts of RUN_DIRS (forge rollout / forge eval directories) as training rows.

    sft: every rollout that ended in success or failure; rs (rejection sampling): those with a reward of at
    least --min-reward. One row per segment: input_ids (the recorded ids), loss_mask (1 on model-sampled tokens
    only) and messages (chat form, decoded with the policy's tokenizer when it is pulled). Train with veRL's SFT
    trainer: data.custom_cls.path=pkg://openforgerl.train.sft_dataset data.custom_cls.name=ForgeSFTDataset.

    verl: RUN_DIRS are tasks instead (one manifest.jsonl, a task dir or a dir of task dirs): the dataset of
    forge train --backend verl (veRL parquet rows whose agent loop rolls out --harness on each task)."""
    from openforgerl.train.export import export_sft

    if kind == "verl":
        from openforgerl.train.verl.dataset import export_verl_dataset

        if len(run_dirs) != 1:
            raise click.UsageError("export verl takes one source: a manifest.jsonl or a directory of tasks")
        harnesses = [h.strip() for h in harness.split(",") if h.strip()]
        path = export_verl_dataset(Path(run_dirs[0]), Path(out), harnesses if len(harnesses) > 1 else harnesses[0])
        click.echo(f"veRL dataset -> {path} (data.train_files={path})")
        return

    result = export_sft([Path(d) for d in run_dirs], Path(out), "rs" if kind == "rs" else "sft", min_reward)
    for line in [result.left_out_line(), *result.notes]:
        if line:
            click.echo(line, err=True)
    click.echo(f"{result.rollouts} rollouts, {result.rows} rows -> {result.path}")
