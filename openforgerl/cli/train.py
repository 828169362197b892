"""forge train: GRPO from harness rollouts, locally (one machine, CPU or one GPU) or with veRL (GPU, Ray)."""

from __future__ import annotations

from typing import Any

import click

from openforgerl.cli import cli
from openforgerl.cli.rollout import HarnessOption


@cli.command()
@click.option("--backend", type=click.Choice(["local", "verl"]), default="local", show_default=True,
              help="local: this machine, vLLM serving the policy; verl: veRL's trainer (GPU, Ray).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="local: a YAML/TOML train config; verl: a veRL config file or a preset name "
                   "(grpo_one_harness, the default; grpo_multi_harness).")
@click.option("--tasks", "tasks", multiple=True, type=click.Path(exists=True),
              help="A build-env manifest.jsonl or task directories (repeatable).")
@click.option("--harness", cls=HarnessOption, help="Harness to run")
@click.option("--model", help="Starting policy: a known model or a checkpoint directory (default smollm2).")
@click.option("--steps", type=click.IntRange(1), help="Training steps (default 2).")
@click.option("--group-size", type=click.IntRange(2), help="Rollouts per task per step (default 4).")
@click.option("--out", type=click.Path(file_okay=False), help="Output directory (default train-out).")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
def train(backend: str, config_file: str | None, tasks: tuple[str, ...], harness: str | None, model: str | None,
          steps: int | None, group_size: int | None, out: str | None, overrides: tuple[str, ...]) -> None:
    """Train the policy with GRPO on rollouts of a real harness in real sandboxes."""
    if backend == "verl":
        _train_verl(config_file, tasks, harness, list(overrides))
        return
    from openforgerl.config import resolve
    from openforgerl.train.local import LocalTrainConfig

    flags = {"harness": harness, "model": model, "steps": steps, "group_size": group_size, "out": out}
    sets = [f"{k}={v}" for k, v in flags.items() if v is not None]
    defaults = {"tasks": list(tasks)} if tasks else {}
    config = resolve(LocalTrainConfig, config_file, [*sets, *overrides], defaults=defaults)
    _train_local(config)


def _train_local(config: Any) -> None:
    from rich.console import Console

    from openforgerl.train.local import LocalTrainer

    config.settings()  # a bad update.* key is refused before anything prints or starts
    console = Console(stderr=True)
    console.print(f"forge train (local): {config.harness} on {', '.join(config.tasks)}, {config.steps} step(s), "
                  f"group {config.group_size} -> {config.out}")
    status = console.status("preflight")

    def on_phase(step: int, phase: str) -> None:
        what = {"rollout": f"rollouts ({config.group_size} per task)", "update": "GRPO update",
                "sync": "saving + loading the new weights into the server"}[phase]
        status.update(f"step {step}: {what}")

    def on_step(m: dict[str, Any]) -> None:
        console.print(
            f"step {m['step']}: reward {m['reward_mean']:.3f}±{m['reward_std']:.3f} success {m['success_rate']:.0%} "
            f"({m['success']}/{m['rollouts']}, infra {m['infra_error'] + m['verifier_error']}) "
            f"loss {m['loss']:+.4f} kl {m['ppo_kl']:+.5f} clip {m['clip_frac']:.3f} grad {m['grad_norm']:.3f} "
            f"entropy {m['entropy']:.3f} mismatch {m['logprob_mismatch_mean']:.2e} | rollout {m['rollout_s']:.0f}s "
            f"update {m['update_s']:.0f}s sync {m['sync_s'] + m['save_s']:.1f}s")

    with status:
        history = LocalTrainer(config, on_step=on_step, on_phase=on_phase).run()
    click.echo(f"{config.out}/metrics.jsonl ({len(history)} step(s)); last checkpoint: "
               f"{history[-1]['checkpoint'] if history else '-'}")


def _train_verl(config_file: str | None, tasks: tuple[str, ...], harness: str | None, overrides: list[str]) -> None:
    import os
    import subprocess
    from pathlib import Path

    from openforgerl.train.verl.launch import check_overrides, verl_command

    if tasks:
        raise click.UsageError("--backend verl reads its tasks from data.train_files (forge export verl MANIFEST "
                               "--out F.parquet writes them); drop --tasks")
    if harness:
        click.echo("note: with --backend verl the harness of each row is in its dataset (forge export verl --harness)",
                   err=True)
    path = Path(config_file) if config_file else None
    check_overrides(path, overrides)
    command = verl_command(path, overrides)
    click.echo(" ".join(command), err=True)
    raise SystemExit(subprocess.call(command, env=dict(os.environ)))
