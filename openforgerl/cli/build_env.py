"""forge build-env: check, build, validate (nop/oracle), repair and publish task environments."""

from __future__ import annotations

import asyncio
import sys

import click

from openforgerl.cli import cli


@cli.command("build-env")
@click.argument("tasks", nargs=-1, type=click.Path(exists=True))
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="YAML/TOML config.")
@click.option("--push", "registry", metavar="REGISTRY", help="Registry host:port to push to (default the local one).")
@click.option("--no-push", is_flag=True, help="Validate and record only; push nothing.")
@click.option("--repair-model", metavar="URL", help="OpenAI-compatible endpoint of the LLM repairer.")
@click.option("--repair-model-name", metavar="NAME", help="Model to ask (default: the first the endpoint lists).")
@click.option("--rounds", type=int, help="Repair rounds after the first try (default 2).")
@click.option("--repeats", type=int, help="Runs of nop and of oracle each (default 2).")
@click.option("--warn-only", multiple=True,
              type=click.Choice(["instruction", "visibility", "hardcoded", "dependencies"]),
              help="Record this check's findings as warnings instead of failing (repeatable).")
@click.option("--agent-user", metavar="UID:GID", help="Run solve.sh as this user, as agents will (default root).")
@click.option("--manifest", type=click.Path(dir_okay=False), help="manifest.jsonl to append published tasks to.")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Report directory (default runs/<time>-build-env).")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
def build_env(tasks, config_file, registry, no_push, repair_model, repair_model_name, rounds, repeats, warn_only,
              agent_user, manifest, out_dir, overrides) -> None:
    """Build and validate the environments of TASKS (task dirs or dirs of task dirs)."""
    from openforgerl.cli.build_env_view import build_with_progress
    from openforgerl.config import resolve
    from openforgerl.envs.build import BuildEnvConfig

    flags = {"registry": registry, "rounds": rounds, "repeats": repeats, "manifest": manifest, "out_dir": out_dir,
             "repair.base_url": repair_model, "repair.model": repair_model_name}
    sets = [f"{k}={v}" for k, v in flags.items() if v is not None] + (["push=false"] if no_push else [])
    sets += [f'agent_user="{agent_user}"'] if agent_user else []
    sets += [f"warn_only=[{','.join(warn_only)}]"] if warn_only else []
    config = resolve(BuildEnvConfig, config_file, [*sets, *overrides], defaults={"tasks": list(tasks)} if tasks else {})
    if not config.tasks:
        raise click.UsageError("give task directories (TASKS) or tasks: in --config")
    report = asyncio.run(build_with_progress(config))
    if not all(o.passed for o in report.outcomes):
        sys.exit(1)
