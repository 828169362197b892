"""forge synth: propose tasks from reference assets, filter and dedupe them, hand them to build-env."""

from __future__ import annotations

import click

from openforgerl.cli import cli


@cli.command()
@click.option("--domain", type=click.Choice(["gui", "claw", "code"]),
              help="Synthesize from the bundled assets of this domain.")
@click.option("--assets", "assets", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Your own asset directory (with asset.toml), or a directory of them (repeatable).")
@click.option("-n", "n", type=int, help="Tasks to keep (default 10).")
@click.option("--proposer", type=click.Choice(["procedural", "llm", "mixed"]), help="Where proposals come from.")
@click.option("--model", help="Proposer model name (llm, mixed; default: the first the endpoint lists).")
@click.option("--base-url", help="Proposer endpoint, OpenAI-compatible (default forge serve's, http://127.0.0.1:8000/v1).")
@click.option("--llm-mode", type=click.Choice(["params", "freeform"]),
              help="params: the model picks a family's parameters; freeform: it writes whole tasks (strong models).")
@click.option("--family", "families", multiple=True, help="Only this family (repeatable).")
@click.option("--seed", type=int, help="Seed of the procedural proposer (default 0).")
@click.option("--out", type=click.Path(file_okay=False), help="Output directory (default runs/<time>-synth).")
@click.option("--no-build", is_flag=True, help="Stop after writing the tasks (no build-env).")
@click.option("--resume", is_flag=True, help="Continue the run in --out: decided candidates are skipped.")
@click.option("--calibrate", metavar="HARNESS", help="Then roll out HARNESS 4 times per task (pass@1, pass@4; "
                                                      "tasks some but not all attempts pass are tagged learnable).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="YAML/TOML config.")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
def synth(domain, assets, n, proposer, model, base_url, llm_mode, families, seed, out, no_build, resume, calibrate,
          config_file, overrides) -> None:
    """Propose tasks from reference assets, keep the verifiable and distinct ones, build and publish them."""
    from openforgerl.cli.interrupt import run_interruptibly
    from openforgerl.cli.synth_view import synth_with_progress
    from openforgerl.config import resolve
    from openforgerl.synth.pipeline import SynthConfig

    flags = {"domain": domain, "n": n, "proposer": proposer, "llm.model": model, "llm.base_url": base_url,
             "llm.mode": llm_mode, "seed": seed, "out": out}
    sets = [f"{k}={v}" for k, v in flags.items() if v is not None]
    sets += ["build=false"] if no_build else []
    sets += ["resume=true"] if resume else []
    sets += [f"calibrate.harnesses=[{calibrate}]", "calibrate.attempts=4", "calibrate.ks=[1,4]"] if calibrate else []
    defaults: dict = {}
    if assets:
        defaults["assets"] = list(assets)
    if families:
        defaults["families"] = list(families)
    config = resolve(SynthConfig, config_file, [*sets, *overrides], defaults=defaults)
    run_interruptibly(synth_with_progress(config), "stopping; the candidates decided so far are kept (--resume "
                      "continues)")
