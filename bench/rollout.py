"""Rollout benchmark: sandbox start overhead vs raw `docker run`, and rollouts/minute by concurrency.

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

from openforgerl.rollout.orchestrator import RolloutConfig  # noqa: E402
from openforgerl.rollout.proxy_handle import ProxySettings  # noqa: E402
from openforgerl.rollout.runtime import LABEL_RUN, SandboxSpec  # noqa: E402
from openforgerl.rollout.runtimes import make_runtime  # noqa: E402
from openforgerl.rollout.runtimes.docker import DockerRuntimeConfig  # noqa: E402
from openforgerl.rollout.run import run_rollouts  # noqa: E402

IMAGE = "openforgerl/base:bookworm"


def raw_docker_run(client) -> float:
    """Seconds from a plain `docker run` (SDK: create + start) to its command having run; removal untimed."""
    started = time.perf_counter()
    container = client.containers.run(IMAGE, ["true"], detach=True, network_mode="host")
    container.wait()
    elapsed = time.perf_counter() - started
    container.remove(force=True)
    return elapsed


async def forge_start(runtime) -> float:
    """Seconds from runtime.start to the harness command having run in the sandbox; removal untimed."""
    started = time.perf_counter()
    box = await runtime.start(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"}))
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
    raw, ours = [], []
    raw_docker_run(client)  # warm both paths once
    asyncio.run(forge_start(runtime))
    for _ in range(repeats):  # interleaved so drift hits both alike
        raw.append(raw_docker_run(client))
        ours.append(asyncio.run(forge_start(runtime)))
    return {"raw_p50": statistics.median(raw), "forge_p50": statistics.median(ours),
            "ratio": statistics.median(ours) / statistics.median(raw)}


def make_task(root: Path) -> Path:
    task = root / "hello"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "hello"\ndomain = "claw"\n')
    (task / "instruction.md").write_text("Create the file /app/hello.txt containing hi.\n")
    (task / "environment" / "Dockerfile").write_text("FROM openforgerl/base:bookworm\nRUN mkdir -p /app\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /app/hello.txt)" = hi ] && r=1 || r=0\necho "{\\"reward\\": $r}" > /logs/verifier/reward.json\n')
    return task


def bench_throughput(rollouts: int, levels: list[int]) -> list[dict[str, float]]:
    rows = []
    # One turn carrying both calls: the scripted engine cycles its turns across all rollouts, so a
    # one-turn script keeps concurrent rollouts from taking each other's turns.
    turns = [{"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "hi"}},
                             {"name": "finish", "arguments": {}}]}]
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp))
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
    rows = bench_throughput(args.rollouts, [1, 4, 8])
    base = rows[0]["per_minute"]
    lines = ["# Rollout benchmark", "",
             f"Machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
             f"image {IMAGE}; {time.strftime('%Y-%m-%d')}.", "",
             "## Sandbox start to harness running (median of %d, interleaved; removal not timed)" % args.repeats, "",
             "| path | p50 s |", "|---|---|",
             f"| raw `docker run IMAGE true` (SDK: create + start, until it exited) | {start['raw_p50']:.3f} |",
             f"| forge docker runtime: hardened start + exec `true` (until it exited) | {start['forge_p50']:.3f} |",
             "", f"**ratio forge / raw: {start['ratio']:.2f}x** (goal <= 1.2x)", "",
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
