"""forge proxy: the recording proxy between harnesses and the inference engine."""

from __future__ import annotations

import contextlib

import click

from openforgerl.cli import cli


@cli.command()
@click.option("--engine", "engine_type", type=click.Choice(["vllm", "scripted"]), default="vllm", show_default=True,
              help="vllm: a vLLM server (token-in/token-out); scripted: canned answers, for tests and benchmarks.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8100, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@click.option("--admin-token", envvar="FORGE_PROXY_ADMIN_TOKEN", default=None,
              help="Bearer token of the admin API (or $FORGE_PROXY_ADMIN_TOKEN).")
@click.option("--model", "model_name", default="smollm2", show_default=True,
              help="The policy: served model name, and whose tokenizer/chat template to use.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Where rollout logs are written and recovered from (default: proxy/ in the data dir, "
                   "$OPENFORGERL_DATA or ~/.local/share/openforgerl).")
@click.option("--tokenizer", type=click.Path(exists=True, file_okay=False), default=None,
              help="A Hugging Face tokenizer directory instead of the pulled model's.")
@click.option("--engine-url", default="http://127.0.0.1:8000", show_default=True, help="vLLM base URL.")
@click.option("--engine-route", type=click.Choice(["completions", "generate"]), default="completions",
              show_default=True, help="vLLM route: /v1/completions (streams) or /inference/v1/generate.")
@click.option("--script", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Scripted engine: a YAML/JSON file with the scripted engine's config (turns, latency_s, ...).")
@click.option("--unknown-model", type=click.Choice(["serve", "reject"]), default="serve", show_default=True,
              help="A request for another model name: serve it with the policy, or answer 404.")
@click.option("-o", "--set", "overrides", multiple=True, help="Config override key.path=value (repeatable).")
@click.option("--sandbox", is_flag=True,
              help="Also serve the model API (only) to rollout sandboxes on the isolated Docker network: on its "
                   "gateway address, its firewall opened for that port while serving. Prints the URL to give runs "
                   "as proxy.sandbox_url.")
@click.option("--sandbox-port", default=0, type=click.IntRange(0, 65535),
              help="Port of that listener (0: port + 1; with N workers, port + 1 + N and up, one per shard).")
@click.option("--model-listen", default=None, metavar="HOST:PORT",
              help="Also serve the model API (only) on HOST:PORT, e.g. 0.0.0.0:8081 in a Kubernetes pod, whose "
                   "NetworkPolicy lets sandboxes reach that port and not the admin API.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(0, 256),
              help="Proxy processes (shards), each owning the rollouts created on it: the admin API on --port "
                   "creates each rollout on the least loaded shard (ports --port+1 ..) and answers with that "
                   "shard's base_url; 0: one per core. Model-only listeners get a port per shard (PORT+i).")
@click.option("--export", "export_to", type=click.Path(dir_okay=False), default=None,
              help="Instead of serving: write every rollout in --data-dir to this .jsonl or .parquet file and exit.")
def proxy(engine_type: str, host: str, port: int, admin_token: str | None, model_name: str, data_dir: str | None,
          tokenizer: str | None, engine_url: str, engine_route: str, script: str | None, unknown_model: str,
          overrides: tuple[str, ...], sandbox: bool, sandbox_port: int, model_listen: str | None,
          workers: int, export_to: str | None) -> None:
    """Serve harness model calls (OpenAI Chat/Responses, Anthropic Messages) and record them token-exactly."""
    from pathlib import Path

    from openforgerl.config import read_config_file, resolve
    from openforgerl.rollout.proxy.config import ProxyConfig
    from openforgerl.rollout.proxy.server import recorded_trajectories, serve
    from openforgerl.rollout.proxy.shards import cores, serve_sharded
    from openforgerl.train.export import export_trajectories

    if not admin_token:
        if not export_to:
            raise click.UsageError("--admin-token (or $FORGE_PROXY_ADMIN_TOKEN) is required to serve")
        admin_token = "unused-for-export"
    engine = {"type": "vllm", "base_url": engine_url, "route": engine_route} if engine_type == "vllm" else \
        {"type": "scripted", **(read_config_file(script) if script else {})}
    defaults = {"host": host, "port": port, "admin_token": admin_token, "model": model_name,
                "tokenizer": tokenizer, "unknown_model": unknown_model, "engine": engine}
    if data_dir:
        defaults["data_dir"] = data_dir
    config = resolve(ProxyConfig, None, list(overrides), defaults=defaults)
    workers = workers or cores()
    if export_to:
        trajectories = recorded_trajectories(config) if workers == 1 else [
            t for shard in sorted(Path(config.data_dir).glob("shard-*/"))
            for t in recorded_trajectories(config.model_copy(update={"data_dir": shard}))]
        export_trajectories(trajectories, Path(export_to))
        segments = sum(len(t.segments) for t in trajectories)
        click.echo(f"{len(trajectories)} rollouts, {segments} segments -> {export_to}")
        return
    click.echo(f"forge proxy: http://{host}:{port} -> {engine_type}, logs in {config.data_dir}", err=True)

    def run(listen: tuple[str, int] | None) -> None:
        if workers == 1:
            serve(config, sandbox_listen=listen)
            return

        def listed(shards) -> None:
            for shard in shards.shards:
                click.echo(f"  shard {shard.index}: {shard.base_url}"
                           + "".join(f"  model API only: {url}" for url in shard.model_urls.values()), err=True)
        click.echo(f"{workers} shards; admin API (POST /rollouts answers with the shard's base_url) on --port",
                   err=True)
        serve_sharded(config, workers, listen, on_listen=listed)

    if model_listen:
        listen_host, _, listen_port = model_listen.rpartition(":")
        if not listen_host or not listen_port.isdigit():
            raise click.BadParameter(f"{model_listen!r} is not HOST:PORT", param_hint="--model-listen")
        click.echo(f"model API only: http://{model_listen}  (proxy.sandbox_url, as sandboxes reach it)", err=True)
        run((listen_host, int(listen_port)))
        return
    if not sandbox:
        run(None)
        return
    from openforgerl.containers.client import docker_client
    from openforgerl.containers.network import ensure_network, open_port

    network = ensure_network(docker_client(), "isolated")
    listen = (network.gateway, sandbox_port or port + 1 + (workers if workers > 1 else 0))  # shards: port+1..
    click.echo(f"sandbox model API: http://{listen[0]}:{listen[1]}  (proxy.sandbox_url)", err=True)
    with contextlib.ExitStack() as opened:
        for shard in range(workers):  # each shard's model-only listener: port + i
            opened.enter_context(open_port(network.bridge, listen[1] + shard))
        run(listen)
