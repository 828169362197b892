"""Rollout benchmark: sandbox start overhead vs raw `docker run` and on the isolated network vs host
networking, the cost of ending the agent's processes plus the integrity guard, and rollouts/minute.

Run: .venv/bin/python bench/rollout.py [--repeats 10] [--rollouts 8]   (needs forge stack up)
Writes bench/results/rollout.md. Everything is measured in the same run, so ratios hold on a noisy
machine; the absolute numbers are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.rollout.integrity import guarded_roots  # noqa: E402
from openforgerl.rollout.orchestrator import RolloutConfig  # noqa: E402
from openforgerl.rollout.proxy_handle import ProxySettings  # noqa: E402
from openforgerl.rollout.run import run_rollouts  # noqa: E402
from openforgerl.rollout.runtime import LABEL_RUN, SandboxSpec  # noqa: E402
from openforgerl.rollout.runtimes import make_runtime  # noqa: E402
from openforgerl.rollout.runtimes.docker import DockerRuntimeConfig  # noqa: E402
from openforgerl.testing.tasks import write_task  # noqa: E402

IMAGE = "openforgerl/base:bookworm"


def raw_docker_run(client, network: str = "host") -> float:
    """Seconds from a plain `docker run` (SDK: create + start) to its command having run; removal untimed."""
    started = time.perf_counter()
    container = client.containers.run(IMAGE, ["true"], detach=True, network_mode=network)
    container.wait()
    elapsed = time.perf_counter() - started
    container.remove(force=True)
    return elapsed


async def forge_start(runtime, network: str = "isolated") -> float:
    """Seconds from runtime.start to the harness command having run in the sandbox; removal untimed."""
    started = time.perf_counter()
    box = await runtime.start(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"}, network=network))
    try:
        result = await box.exec(["true"])
        assert result.ok
        return time.perf_counter() - started
    finally:
        await box.stop()


def bench_start(repeats: int) -> dict[str, float]:
    import docker

    client = docker.from_env()
    runtime = make_runtime(DockerRuntimeConfig())
    asyncio.run(runtime.reach({"isolated"}))  # the network exists before anything is timed
    raw, raw_isolated, host, isolated = [], [], [], []
    raw_docker_run(client)  # warm every path once
    asyncio.run(forge_start(runtime, "host"))
    asyncio.run(forge_start(runtime, "isolated"))
    for _ in range(repeats):  # interleaved so drift hits all alike
        raw.append(raw_docker_run(client))
        raw_isolated.append(raw_docker_run(client, "openforgerl-isolated"))
        host.append(asyncio.run(forge_start(runtime, "host")))
        isolated.append(asyncio.run(forge_start(runtime, "isolated")))
    p50 = statistics.median
    return {"raw_p50": p50(raw), "raw_isolated_p50": p50(raw_isolated), "host_p50": p50(host),
            "isolated_p50": p50(isolated), "ratio": p50(host) / p50(raw),
            "isolated_ratio": p50(isolated) / p50(host), "raw_isolated_ratio": p50(raw_isolated) / p50(raw)}


async def seal_once(runtime, user: str | None) -> float:
    """Seconds to end an agent's processes (a writer left running) and run the guard, as the orchestrator does."""
    box = await runtime.start(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"}))
    try:
        await box.make_dirs(["/app"], owner="agent")
        script = "nohup sh -c 'while true; do echo x > /app/w; sleep 0.05; done' > /dev/null 2>&1 &"
        await box.exec(["sh", "-c", script], user=user or "0")
        started = time.perf_counter()
        await box.end_processes(user)
        await box.changes(guarded_roots())
        return time.perf_counter() - started
    finally:
        await box.stop()


def bench_seal(repeats: int) -> dict[str, dict[str, float]]:
    runtime = make_runtime(DockerRuntimeConfig())
    rows = {}
    for label, user in (("unprivileged agent (the default)", "agent"), ("root agent (task declares root)", None)):
        times = sorted(asyncio.run(seal_once(runtime, user)) for _ in range(repeats))
        rows[label] = {"p50": statistics.median(times), "p95": times[min(len(times) - 1, round(0.95 * len(times)))]}
    return rows


def bench_throughput(rollouts: int, levels: list[int]) -> list[dict[str, float]]:
    rows = []
    # One turn carrying both calls: the scripted engine cycles its turns across all rollouts, so a
    # one-turn script keeps concurrent rollouts from taking each other's turns.
    turns = [{"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "hi"}},
                             {"name": "finish", "arguments": {}}]}]
    with tempfile.TemporaryDirectory() as tmp:
        task = write_task(Path(tmp), solution=None)
        warm = RolloutConfig(tasks=[str(task)], harness="react", run_dir=f"{tmp}/warm",
                             proxy=ProxySettings(engine={"type": "scripted", "turns": turns}))
        asyncio.run(run_rollouts(warm))  # the task image and the harness layer are built before timing
        for level in levels:
            # One task, `rollouts` attempts; the scripted engine answers instantly, so this measures
            # orchestration: containers, harness start, proxy, verifier.
            config = RolloutConfig(tasks=[str(task)], harness="react", attempts=rollouts, concurrency=level,
                                   run_dir=f"{tmp}/run-{level}",
                                   proxy=ProxySettings(engine={"type": "scripted", "turns": turns}))
            started = time.perf_counter()
            _, results = asyncio.run(run_rollouts(config))
            elapsed = time.perf_counter() - started
            rows.append({"concurrency": level, "rollouts": len(results), "seconds": elapsed,
                         "per_minute": 60 * len(results) / elapsed,
                         "statuses": ",".join(sorted({r.status for r in results}))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout.md"))
    args = parser.parse_args()
    start = bench_start(args.repeats)
    seal = bench_seal(max(args.repeats, 20))
    rows = bench_throughput(args.rollouts, [1, 4, 8])
    base = rows[0]["per_minute"]
    lines = ["# Rollout benchmark", "",
             f"Machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
             f"image {IMAGE}; {time.strftime('%Y-%m-%d')}.", "",
             f"## Sandbox start to harness running (median of {args.repeats}, interleaved; removal not timed)", "",
             "| path | p50 s |", "|---|---|",
             f"| raw `docker run IMAGE true` (SDK: create + start, until it exited) | {start['raw_p50']:.3f} |",
             f"| raw `docker run --network openforgerl-isolated IMAGE true` | {start['raw_isolated_p50']:.3f} |",
             f"| forge docker runtime, host network: hardened start + exec `true` | {start['host_p50']:.3f} |",
             f"| forge docker runtime, isolated network (the default) | {start['isolated_p50']:.3f} |",
             "", f"**ratio forge (host network) / raw: {start['ratio']:.2f}x** (goal <= 1.2x)", "",
             f"**ratio isolated / host network: {start['isolated_ratio']:.2f}x** (goal <= 1.1x); the same ratio "
             f"for a raw `docker run`: {start['raw_isolated_ratio']:.2f}x (Docker's own network namespace, veth "
             "and bridge setup; forge adds the default-route removal and the layer snapshot)", "",
             "## Ending the agent's processes + integrity guard, per rollout (a writer left running)", "",
             "| agent | p50 s | p95 s |", "|---|---|---|",
             *(f"| {label} | {row['p50']:.3f} | {row['p95']:.3f} |" for label, row in seal.items()),
             "", "Goal: p95 <= 0.300 s. An unprivileged agent's processes are killed from the host while the "
             "container is frozen; after a root agent the container is restarted (every process ends).", "",
             "## Rollouts per minute (react harness, scripted engine, one container per rollout)", "",
             "| concurrency | rollouts | seconds | rollouts/min | vs concurrency 1 | statuses |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['concurrency']} | {row['rollouts']} | {row['seconds']:.1f} | {row['per_minute']:.1f} | "
                     f"{row['per_minute'] / base:.2f}x | {row['statuses']} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
