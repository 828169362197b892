"""How much memory each harness's own processes need: the numbers behind ``Harness.memory_mb``.

Each harness CLI (and forge's ReAct loop) runs the hello task ("create /app/hello.txt containing hi") in a real
container through the in-run proxy, driven by the scripted engine with the harness's own tools, with no memory
limit. A thread reads the container's memory cgroup from the host every 20 ms: the most anonymous memory (heaps and
stacks: what reclaim cannot drop without swap) its processes held at once. Page cache (the CLI's files read from
its layer) is left out: the kernel reclaims it before it OOM-kills anything. The idle container (its init alone)
is measured the same way and reported beside it.

    python bench/harness_memory.py [--rounds 3] [--harness codex --harness react ...]

Needs the local stack (``forge stack up``) and the harness CLIs (``forge harness install all``); reads the host's
/sys/fs/cgroup, so forge must run where the Docker engine's cgroups are visible (as in CI). Results are written to
``bench/results/harness_memory.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import docker

from openforgerl.rollout.harnesses import HARNESSES
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.rollout.runtime import LABEL_RUN
from openforgerl.rollout.runtimes.docker_host import anon_memory, memory_cgroup
from openforgerl.testing.harness_scripts import REACT, SCRIPTS, TASK_TOML, Script
from openforgerl.testing.tasks import write_task

RESULTS = Path(__file__).parent / "results" / "harness_memory.md"
MIB = 2**20


class Sampler(threading.Thread):
    """The most anonymous memory each container labelled with ``run_id`` held, sampled every ``interval``."""

    def __init__(self, run_id: str, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.client = docker.from_env()
        self.run_id, self.interval = run_id, interval
        self.peaks: dict[str, int] = {}
        self.cgroups: dict[str, tuple[Path, int] | None] = {}  # found once: a removed container's pid is reused
        self.done = threading.Event()

    def run(self) -> None:
        last_list = 0.0
        while not self.done.is_set():
            if time.monotonic() - last_list > 0.5:  # new containers; the API is slower than the cgroup files
                for container in self.client.containers.list(filters={"label": f"{LABEL_RUN}={self.run_id}"}):
                    if container.id not in self.cgroups:
                        self.cgroups[container.id] = memory_cgroup(container.attrs["State"]["Pid"])
                last_list = time.monotonic()
            for cid, found in list(self.cgroups.items()):
                used = anon_memory(*found) if found else None
                if used is not None:
                    self.peaks[cid] = max(self.peaks.get(cid, 0), used)
            time.sleep(self.interval)


def one(script: Script, root: Path) -> tuple[float, str]:
    """Peak anonymous MiB of one hello rollout of ``script``'s harness, and its status."""
    task = write_task(root, "hello", TASK_TOML)
    run_dir = root / f"run-{root.name}"  # its own label: no other rollout's container is sampled
    cfg = RolloutConfig(tasks=[str(task)], harness=script.harness, harness_options=script.options, concurrency=1,
                        run_dir=str(run_dir), proxy=ProxySettings(engine={"type": "scripted",
                                                                           "turns": script.turns("hi")}))
    sampler = Sampler(run_dir.name)
    sampler.start()
    try:
        _, results = asyncio.run(run_rollouts(cfg))
    finally:
        sampler.done.set()
        sampler.join()
    if not sampler.peaks:
        sys.exit("no container was sampled: is the host's /sys/fs/cgroup readable here?")
    return max(sampler.peaks.values()) / MIB, results[0].status


def idle(root: Path) -> float:
    """Peak anonymous MiB of the task container with nothing but its init (the nop harness)."""
    return one(Script("nop", "", lambda c: {}), root)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--harness", action="append", help="only these (default: every CLI and react)")
    args = parser.parse_args()
    scripts = [s for s in [*SCRIPTS, REACT] if not args.harness or s.harness in args.harness]
    rows = []
    with tempfile.TemporaryDirectory(prefix="forge-harness-memory-") as tmp:
        base = idle(Path(tmp) / "idle")
        for script in scripts:
            peaks, statuses = [], set()
            for i in range(args.rounds):
                peak, status = one(script, Path(tmp) / f"{script.harness}-{i}")
                peaks.append(peak)
                statuses.add(status)
            declared = HARNESSES.load(script.harness).memory_mb
            rows.append((script.harness, statistics.median(peaks), max(peaks), ",".join(sorted(statuses)), declared))
            print(f"{script.harness}: median {statistics.median(peaks):.0f} MiB, max {max(peaks):.0f} MiB "
                  f"({', '.join(sorted(statuses))}); declared {declared}", flush=True)
    lines = ["# Harness memory", "",
             f"`bench/harness_memory.py --rounds {args.rounds}`: the hello task in a real container, no memory "
             "limit, scripted engine through the in-run proxy; the most anonymous memory (heaps, stacks; not page "
             "cache) the container's processes held at once, sampled from its memory cgroup every 20 ms. The task "
             f"container idle (its init alone): {base:.1f} MiB.", "",
             "| harness | peak MiB (median) | peak MiB (max) | status | declared `memory_mb` |",
             "|---|---:|---:|---|---:|"]
    lines += [f"| {name} | {median:.0f} | {top:.0f} | {status} | {declared if declared else 'unknown'} |"
              for name, median, top, status, declared in rows]
    lines += ["", f"Run {time.strftime('%Y-%m-%d')}. A harness declares `memory_mb` as 1.25x the largest peak seen "
              "over runs, rounded up to 64 MiB (it is what the task's `memory_mb` must hold before a harness OOM kill "
              "counts as the agent's doing). Node-based CLIs size their heap by the memory they see, so under a limit "
              "they use less: the floors err towards calling a kill an infra error. The browser harness (Chromium) "
              "is not measured here: it declares nothing, so its OOM kills stay infra errors."]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
