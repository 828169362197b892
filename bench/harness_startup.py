"""How long a harness CLI takes per rollout with and without the Node compile cache its install ships.

Each round runs the hello task ("create /app/hello.txt containing hi") as a real rollout — real container,
harness layer, in-run proxy, scripted engine with the harness's own tools — twice, in turn: once as rollouts
run it (the CLI's Node reads the layer's compile cache) and once with the cache's environment left out (what
every rollout did before the cache: OpenClaw then compiles into a cache of its own under /tmp, empty in each
fresh sandbox). Reports the rollout's ``harness_s`` (the CLI's run, model calls included) for each, and the
ratio of medians: the host's noise hits both sides of each round alike.

    python bench/harness_startup.py [--rounds 3] [--harness openclaw]

Needs the local stack (``forge stack up``) and the harness installed (``forge harness install openclaw``).
Results are written to ``bench/results/harness_startup.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from openforgerl.rollout.harness import Harness
from openforgerl.rollout.harnesses.install import install
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.harness_scripts import SCRIPTS, TASK_TOML, Script
from openforgerl.testing.tasks import write_task

RESULTS = Path(__file__).parent / "results" / "harness_startup.md"


def one(script: Script, root: Path, cached: bool) -> tuple[float, str]:
    """``harness_s`` of one hello rollout of ``script``'s harness, and its status."""
    task = write_task(root, "hello", TASK_TOML)
    cfg = RolloutConfig(tasks=[str(task)], harness=script.harness, harness_options=script.options, concurrency=1,
                        run_dir=str(root / "run"), proxy=ProxySettings(engine={"type": "scripted",
                                                                                "turns": script.turns("hi")}))
    if cached:
        _, results = asyncio.run(run_rollouts(cfg))
    else:
        with mock.patch.object(Harness, "compile_cache_env", lambda self: {}):
            _, results = asyncio.run(run_rollouts(cfg))
    return results[0].timings["harness_s"], results[0].status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--harness", default="openclaw")
    args = parser.parse_args()
    script = next(s for s in SCRIPTS if s.harness == args.harness)
    record = install(args.harness, lambda action: None)
    if not record.compile_cache:
        raise SystemExit(f"{args.harness} has no compile cache (its package does not ask for one, or the warm-up "
                         "failed: see the install's warning)")
    times: dict[bool, list[float]] = {False: [], True: []}
    statuses = set()
    with tempfile.TemporaryDirectory(prefix="forge-harness-startup-") as tmp:
        one(script, Path(tmp) / "layer", True)  # builds the harness layer once, outside the timings
        for i in range(args.rounds):
            for cached in (False, True):  # in turn: both sides of a round see the same host
                seconds, status = one(script, Path(tmp) / f"{i}-{cached}", cached)
                times[cached].append(seconds)
                statuses.add(status)
                print(f"round {i + 1}: {'cache' if cached else 'no cache'} {seconds:.1f} s ({status})", flush=True)
    cold, warm = statistics.median(times[False]), statistics.median(times[True])
    print(f"median harness_s: no cache {cold:.1f} s, cache {warm:.1f} s, ratio {warm / cold:.2f}")
    lines = ["# Harness start-up: the Node compile cache an install ships", "",
             f"`bench/harness_startup.py --harness {args.harness} --rounds {args.rounds}`: the hello task as a real "
             "rollout (container, harness layer, in-run proxy, scripted engine: 2 model calls), in turn without and "
             "with the layer's compile cache; `harness_s` is the CLI's whole run.", "",
             "| harness | no cache, s (median) | cache, s (median) | cache / no cache | runs (no cache; cache) |",
             "|---|---:|---:|---:|---|",
             f"| {args.harness} | {cold:.1f} | {warm:.1f} | {warm / cold:.2f} | "
             f"{', '.join(f'{t:.1f}' for t in times[False])}; {', '.join(f'{t:.1f}' for t in times[True])} |", "",
             f"Run {time.strftime('%Y-%m-%d')} on this host (2 shared cores); statuses: {', '.join(sorted(statuses))}."]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
