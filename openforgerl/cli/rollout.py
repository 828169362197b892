"""forge rollout: run harnesses on tasks in sandboxes, verify, and record trajectories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from openforgerl.cli import cli


class HarnessOption(click.Option):
    """``--harness``, whose help lists the harness table: read only when help is shown, since it scans plugins."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from openforgerl.rollout.harnesses import HARNESSES

        self.help = f"Harness to run: {', '.join(HARNESSES.names())}."
        return super().get_help_record(ctx)


def runtime_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--runtime``, ``--kube-context`` and ``--namespace``, shared by forge rollout and forge eval."""
    for option in reversed([
            click.option("--runtime", type=click.Choice(["docker", "local", "kubernetes"]), help="Where rollouts run."),
            click.option("--kube-context", help="kubernetes runtime: the kubeconfig context (default: current)."),
            click.option("--namespace", help="kubernetes runtime: the namespace of the pods (default: default).")]):
        command = option(command)
    return command


def runtime_sets(runtime: str | None, kube_context: str | None, namespace: str | None) -> list[str]:
    """Config overrides for the runtime flags; a kube flag alone selects the kubernetes runtime."""
    sets = [f"runtime.type={runtime}"] if runtime else []
    if kube_context or namespace:
        sets += [] if runtime else ["runtime.type=kubernetes"]
        sets += [f"runtime.context={kube_context}"] if kube_context else []
        sets += [f"runtime.namespace={namespace}"] if namespace else []
    return sets


@cli.command()
@click.argument("tasks", nargs=-1, type=click.Path(exists=True))  # dirs or a manifest.jsonl
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="YAML/TOML run config.")
@click.option("--harness", cls=HarnessOption, help="Harness to run")
@click.option("--model", help="Policy model name (default smollm2).")
@click.option("-n", "--attempts", type=int, help="Rollouts per task.")
@click.option("--concurrency", type=int, help="Rollouts at once.")
@runtime_options
@click.option("--proxy-url", help="Use a running forge proxy instead of starting one.")
@click.option("--engine-url", help="vLLM base URL for the in-run proxy (default http://127.0.0.1:8000).")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Output directory (default runs/<time>-<harness>).")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
def rollout(tasks, config_file, harness, model, attempts, concurrency, runtime, kube_context, namespace, proxy_url,
            engine_url, run_dir, overrides) -> None:
    """Roll out a harness on TASKS (task dirs, dirs of task dirs, or a build-env manifest.jsonl)."""
    from openforgerl.cli.interrupt import run_interruptibly
    from openforgerl.cli.rollout_view import run_with_progress
    from openforgerl.config import resolve
    from openforgerl.rollout.orchestrator import RolloutConfig

    flags = {"harness": harness, "model": model, "attempts": attempts, "concurrency": concurrency,
             "run_dir": run_dir}
    sets = [f"{k}={v}" for k, v in flags.items() if v is not None]
    sets += runtime_sets(runtime, kube_context, namespace)
    sets += [f"proxy.url={proxy_url}"] if proxy_url else []
    sets += [f"proxy.engine.base_url={engine_url}"] if engine_url else []
    defaults = {"tasks": list(tasks)} if tasks else {}
    config = resolve(RolloutConfig, config_file, [*sets, *overrides], defaults=defaults)
    if not config.tasks:
        raise click.UsageError("give task directories (TASKS) or tasks: in --config")
    run_interruptibly(run_with_progress(config))
