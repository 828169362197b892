"""build-env benchmark: 20 tasks sharing one environment vs the same 20 tasks each building its own.

Run: .venv/bin/python bench/build_env.py [--tasks 20] [--repeats 2]   (needs forge stack up)
Writes bench/results/build_env.md.

Both arms use the real claw template (services + a setup step) and the real ``forge build-env``
path. "shared": every task renders the same environment, so its content hash is equal and it is
built once. "separate": each task adds a unique build arg default (``ARG FORGE_TASK=<name>`` right
after FROM), which changes the hash and invalidates Docker's layer cache for every later step —
what building each task on its own costs. Each arm carries a fresh run nonce, so nothing is
inherited from an earlier run; the images both arms made are removed at the end. Two views:
the build phase alone (``EnvBuilder._image``, what dedup saves directly), and the whole
``forge build-env`` (static checks, build, dependencies, nop + oracle x repeats, no push).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.envs.build import BuildEnvConfig, EnvBuilder, build_envs  # noqa: E402
from openforgerl.containers.images import task_image_tag  # noqa: E402
from openforgerl.envs.render import render_environment  # noqa: E402
from openforgerl.tasks import Task  # noqa: E402

SETUP = ["git init -q /srv/notes && cd /srv/notes && for i in $(seq 1 40); do echo note $i > n$i.txt; "
         "git add n$i.txt; git -c user.name=f -c user.email=f@x commit -qm n$i; done",
         "python3 -m compileall -q /usr/lib/python3.11/email /usr/lib/python3.11/json >/dev/null"]
TEST_SH = """#!/bin/bash
if [ "$(cat /app/answer.txt 2>/dev/null)" = 40 ]; then r=1; else r=0; fi
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
SOLVE_SH = "#!/bin/bash\ngit -C /srv/notes rev-list --count HEAD > /app/answer.txt\n"


def make_tasks(root: Path, count: int, nonce: str, separate: bool) -> list[Path]:
    dirs = []
    for i in range(count):
        task = root / f"task-{i:02d}"
        (task / "tests").mkdir(parents=True)
        (task / "solution").mkdir()
        setup = [f"echo {nonce} > /etc/bench-nonce", *SETUP]
        params = {"services": ["mail"], "setup": setup}
        toml = (f'[task]\nname = "task-{i:02d}"\ndomain = "claw"\n[agent]\ntimeout_sec = 60\n'
                f'[environment]\ntemplate = "claw"\n[environment.template_params]\n'
                f"services = {json.dumps(params['services'])}\nsetup = {json.dumps(setup)}\n")
        (task / "task.toml").write_text(toml)
        (task / "instruction.md").write_text(f"Task {i}: count the commits of the git repository in /srv/notes "
                                             "and write the number into /app/answer.txt.\n")
        (task / "tests" / "test.sh").write_text(TEST_SH)
        (task / "solution" / "solve.sh").write_text(SOLVE_SH)
        render_environment(task)
        if separate:  # this task's own build: a different hash and no layer reuse after FROM
            dockerfile = task / "environment" / "Dockerfile"
            # Dropping the "rendered from template" first line marks it hand-edited: build-env keeps it.
            lines = dockerfile.read_text().splitlines(keepends=True)[1:]
            at = next(n for n, line in enumerate(lines) if line.startswith("FROM")) + 1
            dockerfile.write_text("".join([*lines[:at], f"ARG FORGE_TASK={task.name}\n", *lines[at:]]))
        dirs.append(task)
    return dirs


async def build_phase(builder: EnvBuilder, tasks: list[Path]) -> tuple[float, int]:
    started, builds = time.perf_counter(), 0
    for task_dir in tasks:
        _, built = await builder._image(Task.load(task_dir))
        builds += built
    return time.perf_counter() - started, builds


def remove_images(tasks: list[Path]) -> None:
    from openforgerl.containers.client import docker_client

    client = docker_client()
    for tag in {task_image_tag(Task.load(t)) for t in tasks}:
        try:
            client.images.remove(tag, force=True)
        except Exception:  # already gone
            pass


def arm(root: Path, count: int, repeats: int, separate: bool) -> dict:
    name = "separate" if separate else "shared"
    phase_tasks = make_tasks(root / f"{name}-phase", count, uuid.uuid4().hex, separate)
    config = BuildEnvConfig(tasks=[str(root / f"{name}-phase")], push=False, out_dir=str(root / f"{name}-out0"))
    seconds, builds = asyncio.run(build_phase(EnvBuilder(config, root / f"{name}-out0"), phase_tasks))
    remove_images(phase_tasks)
    full_tasks = make_tasks(root / f"{name}-full", count, uuid.uuid4().hex, separate)
    config = BuildEnvConfig(tasks=[str(root / f"{name}-full")], push=False, repeats=repeats,
                            out_dir=str(root / f"{name}-out"), manifest=str(root / f"{name}-manifest.jsonl"))
    started = time.perf_counter()
    report = asyncio.run(build_envs(config))
    full_seconds = time.perf_counter() - started
    remove_images(full_tasks)
    passed = sum(o.passed for o in report.outcomes)
    reasons = sorted({o.reason for o in report.outcomes if not o.passed})
    print(f"{name}: build phase {seconds:.1f} s / {builds} builds; full {full_seconds:.1f} s, "
          f"{report.to_dict()['builds']} builds, {passed}/{count} passed {reasons}", flush=True)
    return {"phase_s": seconds, "phase_builds": builds, "full_s": full_seconds,
            "full_builds": report.to_dict()["builds"], "passed": passed, "reasons": reasons}


def write_report(path: Path, count: int, repeats: int, shared: dict, separate: dict) -> None:
    lines = [
        "# build-env benchmark", "",
        f"Machine: {platform.machine()}, 2 cores shared with other work; {count} claw tasks (template with the "
        f"mail service + a git/compileall setup step); nop + oracle x{repeats} each; no push; "
        f"{time.strftime('%Y-%m-%d')}. Both arms ran in this one run (`bench/build_env.py`).", "",
        "## Build phase only (content-hash dedup vs one build per task)", "",
        "| arm | image builds | seconds |", "|---|---|---|",
        f"| shared environment (one content hash) | {shared['phase_builds']} | {shared['phase_s']:.1f} |",
        f"| separate (unique ARG per task, no layer reuse) | {separate['phase_builds']} | {separate['phase_s']:.1f} |",
        "", f"**ratio separate / shared: {separate['phase_s'] / shared['phase_s']:.1f}x** wall time, "
            f"{separate['phase_builds']} vs {shared['phase_builds']} builds", "",
        "## Whole `forge build-env` (static checks, build, dependency probe, nop + oracle)", "",
        "| arm | image builds | seconds | passed |", "|---|---|---|---|",
        f"| shared | {shared['full_builds']} | {shared['full_s']:.1f} | {shared['passed']}/{count} |",
        f"| separate | {separate['full_builds']} | {separate['full_s']:.1f} | {separate['passed']}/{count} |",
        "", f"**ratio separate / shared: {separate['full_s'] / shared['full_s']:.2f}x** — the nop/oracle containers "
            f"({4 * count if repeats == 2 else 2 * repeats * count} per arm) cost the same in both arms, "
            "so dedup saves the build share only.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "build_env.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forge-bench-build-") as tmp:
        shared = arm(Path(tmp), args.tasks, args.repeats, separate=False)
        separate = arm(Path(tmp), args.tasks, args.repeats, separate=True)
    write_report(Path(args.out), args.tasks, args.repeats, shared, separate)
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
