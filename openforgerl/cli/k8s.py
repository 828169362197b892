"""forge k8s: the Kubernetes runtime's objects for review, the proxy's Deployment, and the reaper."""

from __future__ import annotations

import asyncio
from typing import Any

import click
import yaml

from openforgerl.cli import cli


@cli.group()
def k8s() -> None:
    """Kubernetes: print what the kubernetes runtime creates; deploy the proxy; delete leftovers."""


def _settings(config_file: str | None, namespace: str | None, overrides: tuple[str, ...]) -> Any:
    from openforgerl.config import resolve
    from openforgerl.rollout.runtimes.kubernetes import KubernetesRuntimeConfig

    sets = [f"namespace={namespace}"] if namespace else []
    return resolve(KubernetesRuntimeConfig, config_file, [*sets, *overrides])


class _Plain(yaml.SafeDumper):
    """No anchors and aliases: every document reads on its own, as kubectl and reviewers expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(documents: list[dict[str, Any]]) -> None:
    click.echo(yaml.dump_all(documents, Dumper=_Plain, sort_keys=False).rstrip())


@k8s.command()
@click.argument("task", type=click.Path(exists=True, file_okay=False))
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML/TOML file of kubernetes runtime settings (the runtime: block of a run config).")
@click.option("--namespace", help="Namespace of the objects (default: default).")
@click.option("--image", help="Image of the pod (default: the task's [environment] docker_image).")
@click.option("--run", "run_id", default="RUN", show_default=True, help="The run id the labels carry.")
@click.option("-o", "--set", "overrides", multiple=True, help="Runtime setting key=value (repeatable).")
def manifest(task, config_file, namespace, image, run_id, overrides) -> None:
    """Print the Pod and NetworkPolicy a rollout of TASK runs under, exactly as the runtime creates them."""
    from openforgerl.errors import UserError
    from openforgerl.rollout.orchestrator import SANDBOX_SETUP_SEC, RolloutConfig, agent_user, network_mode
    from openforgerl.rollout.runtime import LABEL_ATTEMPT, LABEL_ROLLOUT, LABEL_RUN, LABEL_TASK, SandboxSpec
    from openforgerl.rollout.runtimes import kube_manifests as manifests
    from openforgerl.tasks import Task

    settings = _settings(config_file, namespace, overrides)
    loaded = Task.load(task)
    rollout = RolloutConfig(tasks=[task])
    image = image or loaded.config.environment.docker_image
    if not image:
        raise UserError(f"{task}: no [environment] docker_image",
                        fix="pass --image, or publish it with forge build-env --push REGISTRY")
    network = network_mode(rollout, loaded)
    spec = SandboxSpec(image=image, labels={LABEL_RUN: run_id, LABEL_ROLLOUT: "ROLLOUT", LABEL_TASK: loaded.name,
                                            LABEL_ATTEMPT: "0"},
                       cpus=loaded.config.environment.cpus, memory_mb=loaded.config.environment.memory_mb,
                       storage_mb=loaded.config.environment.storage_mb, network=network,
                       agent_user=agent_user(rollout, loaded),
                       deadline_sec=loaded.config.agent.timeout_sec + loaded.config.verifier.timeout_sec
                       + SANDBOX_SETUP_SEC)
    labels = manifests.pod_labels(spec, "INSTANCE", 0, "HOST")
    pod = manifests.pod_manifest(spec, settings, name=manifests.pod_name(spec, "xxxxxxxx"), labels=labels)
    _dump([manifests.network_policy(run_id, network, settings), pod])


@k8s.command()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML/TOML file of kubernetes runtime settings.")
@click.option("--namespace", help="Namespace of the proxy (default: default).")
@click.option("--image", required=True, help="An image with openforgerl installed (forge on PATH).")
@click.option("--model", default="smollm2", show_default=True, help="The policy model the proxy serves.")
@click.option("--engine-url", required=True, help="The vLLM server as the proxy's pod reaches it.")
@click.option("--secret", default="forge-proxy-admin", show_default=True,
              help="Secret holding the admin token (key: token).")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Proxies, each owning the rollouts created on it (a StatefulSet when more than 1; the run "
                   "config's proxy.shards, printed as a comment, names each one).")
@click.option("-o", "--set", "overrides", multiple=True, help="Runtime setting key=value (repeatable).")
def proxy(config_file, namespace, image, model, engine_url, secret, replicas, overrides) -> None:
    """Print the recording proxy's Deployment and Service (pipe to kubectl apply -f -)."""
    from openforgerl.rollout.runtimes.kube_manifests import proxy_manifests, proxy_shards

    settings = _settings(config_file, namespace, overrides)
    if replicas > 1:
        shards = yaml.dump({"proxy": {"shards": proxy_shards(settings, replicas)}}, Dumper=_Plain, sort_keys=False)
        click.echo("# The run config's proxy (an orchestrator in the cluster resolves these names):\n"
                   + "".join(f"#   {line}\n" for line in shards.splitlines()) + "---")
    _dump(proxy_manifests(settings, image=image, model=model, engine_url=engine_url, secret=secret,
                          replicas=replicas))


@k8s.command()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML/TOML file of kubernetes runtime settings.")
@click.option("--kube-context", help="The kubeconfig context (default: the current one).")
@click.option("--namespace", help="Namespace to sweep (default: default).")
@click.option("-o", "--set", "overrides", multiple=True, help="Runtime setting key=value (repeatable).")
def sweep(config_file, kube_context, namespace, overrides) -> None:
    """Delete forge pods and policies whose owner on this host died, and pods that already ended."""
    from openforgerl.rollout.runtimes.kubernetes import KubernetesRuntime

    sets = (f"context={kube_context}",) if kube_context else ()
    runtime = KubernetesRuntime(_settings(config_file, namespace, (*sets, *overrides)))

    async def run() -> int:
        try:
            return await runtime.sweep()
        finally:
            await runtime.release()

    click.echo(f"deleted {asyncio.run(run())} pod(s)")
