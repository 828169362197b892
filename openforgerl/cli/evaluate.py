"""forge eval: roll out several harnesses on tasks and score them (pass@k, pass^k, behaviour, cost)."""

from __future__ import annotations

import click

from openforgerl.cli import cli
from openforgerl.cli.rollout import HarnessOption, runtime_options, runtime_sets


def _ints(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give whole numbers separated by commas, e.g. 1,3") from None


@cli.command("eval")
@click.argument("tasks", nargs=-1, type=click.Path(exists=True))
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="YAML/TOML eval config.")
@click.option("--harness", "harnesses", cls=HarnessOption, help="Harnesses, comma-separated (e.g. react,codex).")
@click.option("--model", help="Policy model name (default smollm2).")
@click.option("-n", "--attempts", type=int, help="Rollouts per task and harness (at least the largest k).")
@click.option("-k", "ks", help="The k of pass@k / pass^k, comma-separated (default 1).")
@click.option("--concurrency", type=int, help="Rollouts at once.")
@runtime_options
@click.option("--proxy-url", help="Use a running forge proxy instead of starting one.")
@click.option("--engine-url", help="vLLM base URL for the in-run proxy (default http://127.0.0.1:8000).")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Output directory (default runs/<time>-eval).")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
def eval_(tasks, config_file, harnesses, model, attempts, ks, concurrency, runtime, kube_context, namespace,
          proxy_url, engine_url, run_dir, overrides) -> None:
    """Evaluate harnesses on TASKS: pass@k, pass^k and mean reward per task, per harness and overall."""
    from openforgerl.cli.evaluate_view import eval_with_progress
    from openforgerl.cli.interrupt import run_interruptibly
    from openforgerl.config import resolve
    from openforgerl.evaluation.runner import EvalConfig

    sets = [f"{k}={v}" for k, v in {"model": model, "attempts": attempts, "concurrency": concurrency,
                                    "run_dir": run_dir}.items() if v is not None]
    sets += runtime_sets(runtime, kube_context, namespace)
    sets += [f"proxy.url={proxy_url}"] if proxy_url else []
    sets += [f"proxy.engine.base_url={engine_url}"] if engine_url else []
    defaults: dict = {"tasks": list(tasks)} if tasks else {}
    if harnesses:
        defaults["harnesses"] = [h.strip() for h in harnesses.split(",") if h.strip()]
    if ks is not None:
        defaults["ks"] = _ints(ks)
    config = resolve(EvalConfig, config_file, [*sets, *overrides], defaults=defaults)
    if not config.tasks:
        raise click.UsageError("give task directories (TASKS) or tasks: in --config")
    run_interruptibly(eval_with_progress(config))
