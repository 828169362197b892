"""The README's first command, timed: ./scripts/demo from an empty output directory, stage by stage.

What is measured: the wall time of the whole demo and of each stage (the demo writes ``timings.tsv``),
the before/after table ``forge report`` prints, and the training curve. Goal (issue 16): under 45
minutes on a fresh 2-core machine *including installs*. This run reuses what the machine already has
(the venv, the Docker engine and base image, the pulled model, the harness CLIs, Docker's layer cache);
what those cost on a fresh machine is measured apart (a clean clone's ``.ci/run`` installs the venv) and
written next to the result by hand.

Run: .venv/bin/python bench/demo.py [--size full|small]   (~25 min full, ~6 min small)
Writes its section of bench/results/demo.md (between <!-- SIZE:begin --> and <!-- SIZE:end -->).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "demo.md"
GOAL_MIN = 45


def section(size: str, wall: float, rc: int, work: Path, stderr: str) -> str:
    timings = [line.split("\t") for line in (work / "timings.tsv").read_text().splitlines() if "\t" in line]
    rows = "\n".join(f"| {name} | {int(seconds)} s |" for name, seconds in timings)
    table = stderr.split("harness / task", 1)
    report = ("harness / task" + table[1].split("pass@1 per harness", 1)[0]).rstrip() if len(table) == 2 else \
        "(no report table: the demo did not reach its last stage)"
    metrics = [json.loads(line) for line in (work / "train" / "metrics.jsonl").read_text().splitlines()] \
        if (work / "train" / "metrics.jsonl").is_file() else []
    curve = ", ".join(f"{m['reward_mean']:.2f}" for m in metrics) or "-"
    trained = sum(m.get("trained_samples", 0) for m in metrics)
    return f"""<!-- {size}:begin -->
## `FORGE_DEMO_SIZE={size}` ({time.strftime('%Y-%m-%d')}, 2 cores, no GPU)

Exit status {rc}; wall time **{wall / 60:.1f} min** with the installs already on the machine (goal: under
{GOAL_MIN} min including installs on a fresh machine; see the note below for what installs add).

| stage | wall |
|---|---|
{rows}

Training: mean reward per step {curve} ({trained} samples with a non-zero advantage in all).

The before/after table `forge report` printed:

```
{report}
```
<!-- {size}:end -->"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=["full", "small"], default="full")
    parser.add_argument("--work", default=None, help="output directory (default runs/bench-demo-SIZE, emptied first)")
    args = parser.parse_args()
    work = Path(args.work or ROOT / "runs" / f"bench-demo-{args.size}").resolve()
    shutil.rmtree(work, ignore_errors=True)
    env = {**os.environ, "FORGE_DEMO_DIR": str(work), "FORGE_DEMO_SIZE": args.size}
    started = time.monotonic()
    done = subprocess.run([str(ROOT / "scripts" / "demo")], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (work / "demo.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    text = section(args.size, wall, done.returncode, work, done.stderr).replace(f"{ROOT}/", "")  # no machine paths
    old = RESULTS.read_text() if RESULTS.exists() else "# The demo, timed (`bench/demo.py`)\n"
    pattern = re.compile(rf"<!-- {args.size}:begin -->.*?<!-- {args.size}:end -->", re.S)
    new = pattern.sub(lambda _: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text + "\n"
    RESULTS.write_text(new)
    print(text)
    print(f"log: {work / 'demo.log'}")


if __name__ == "__main__":
    main()
