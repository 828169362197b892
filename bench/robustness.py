"""Robustness benchmark: what used to break a run, measured against the bound it must hold now.

- Agent timeouts at concurrency: N agents that never exit, a 3 s timeout: seconds until all are killed
  (before: the kill waited for a free thread of Python's default pool; 91 s at concurrency 6).
- Agent output: seconds of forge time to run an agent printing 16/32/64 MiB (before: quadratic,
  4.4/13.6/59 s), and how much is kept.
- The proxy under a 24 MB prompt: /health latency while it is refused (before: 36 s, event loop blocked).
- Verifier hangs (``--verifier-hangs``, its own section): what the control run on a fresh container costs, per
  rollout, when the agent's work hangs the verifier (now a kept failure, reward 0; before: a discarded
  verifier_error) and when the verifier hangs by itself (still a verifier_error).

Run: .venv/bin/python bench/robustness.py   (needs forge stack up and the pulled model's tokenizer)
Writes bench/results/robustness.md.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.rollout.orchestrator import RolloutConfig  # noqa: E402
from openforgerl.rollout.run import run_rollouts  # noqa: E402
from openforgerl.rollout.runtime import LABEL_RUN, SandboxSpec  # noqa: E402
from openforgerl.rollout.runtimes.docker import DockerRuntime  # noqa: E402
from openforgerl.testing.proxy import ADMIN_TOKEN, InProcessProxy, policy_template  # noqa: E402
from openforgerl.testing.tasks import write_task  # noqa: E402

IMAGE = "openforgerl/base:bookworm"


async def hung_agents(concurrency: int, timeout: float = 3.0) -> float:
    runtime = DockerRuntime()
    runtime.size(concurrency)

    async def one() -> None:
        async with runtime.sandbox(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"})) as box:
            result = await box.exec(["sh", "-c", "sleep 600 & sleep 600"], timeout=timeout, user="agent")
            assert result.timed_out
    started = time.perf_counter()
    async with runtime.sandbox(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"})):
        pass  # warm
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return time.perf_counter() - started


async def printing(megabytes: int) -> tuple[float, int]:
    runtime = DockerRuntime()
    async with runtime.sandbox(SandboxSpec(image=IMAGE, labels={LABEL_RUN: "bench"})) as box:
        started = time.perf_counter()
        result = await box.exec(["sh", "-c", f"head -c {megabytes}M /dev/zero | tr '\\0' x"], timeout=300)
        return time.perf_counter() - started, len(result.stdout)


async def health_under_a_huge_prompt() -> tuple[float, float, int]:
    proxy = InProcessProxy(template=policy_template(), max_context_tokens=8192)
    body = {"model": "m", "messages": [{"role": "user", "content": "w " * 12_000_000}]}
    async with proxy.client() as client:
        _, token = await proxy.new_rollout(client)
        huge = asyncio.ensure_future(client.post("/v1/chat/completions", json=body,
                                                 headers={"authorization": f"Bearer {token}"}))
        latencies = []
        while not huge.done():
            started = time.perf_counter()
            await client.get("/health", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
        answer = await huge
    return max(latencies or [0.0]), statistics.median(latencies or [0.0]), answer.status_code


RUNS_PROGRAM = """#!/bin/bash
mkdir -p /logs/verifier
out=$(python3 /app/solution.py 2>/dev/null)
[ "$out" = hi ] && r=1 || r=0
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
HANG_CASES = {  # name: (what the agent leaves in /app/solution.py, test.sh, what it is)
    "solves": ("print('hi')", RUNS_PROGRAM, "the agent's program prints hi (no hang: the baseline)"),
    "agent-hangs-it": ("while True: pass", RUNS_PROGRAM, "the agent's program loops; the verifier runs it"),
    "hangs-by-itself": ("print('hi')", "#!/bin/bash\nsleep 600\n", "test.sh sleeps whatever the agent did"),
}
VERIFIER_TIMEOUT = 8.0


async def verifier_hangs(attempts: int = 4) -> dict[str, dict]:
    """Each case ``attempts`` times (oracle harness, concurrency 2, verifier timeout 8 s) on Docker: statuses and
    medians of the verifier phase, the control run and the whole rollout."""
    with tempfile.TemporaryDirectory(prefix="forge-bench-hang-") as tmp:
        tasks = [write_task(Path(tmp) / "tasks", name, test_sh=test_sh,
                            solution=f"#!/bin/bash\ncat > /app/solution.py <<'EOF'\n{program}\nEOF\n")
                 for name, (program, test_sh, _) in HANG_CASES.items()]
        config = RolloutConfig(tasks=[str(t) for t in tasks], harness="oracle", attempts=attempts, concurrency=2,
                               verifier_timeout_sec=VERIFIER_TIMEOUT, run_dir=str(Path(tmp) / "run"))
        _, results = await run_rollouts(config)
    found = {}
    for name in HANG_CASES:
        mine = [r for r in results if r.task == name]
        found[name] = {"statuses": sorted({f"{r.status} ({r.reward})" for r in mine}),
                       "verifier_s": statistics.median(r.timings.get("verifier_s", 0.0) for r in mine),
                       "control_s": statistics.median(r.timings.get("control_verifier_s", 0.0) for r in mine),
                       "total_s": statistics.median(r.timings.get("total_s", 0.0) for r in mine), "n": len(mine)}
    return found


def hang_section(found: dict[str, dict]) -> str:
    lines = ["<!-- verifier-hangs:begin -->", "## A verifier that runs past its timeout: whose hang is it",
             "", f"`bench/robustness.py --verifier-hangs` on Docker ({time.strftime('%Y-%m-%d')}): each case "
             f"{next(iter(found.values()))['n']} times, oracle harness, concurrency 2, verifier timeout "
             f"{VERIFIER_TIMEOUT:.0f} s. On a timeout the orchestrator runs the same verifier on a fresh container "
             "of the task's image (no agent): one that ends there within half its timeout puts the hang on the "
             "agent's work (failure, reward 0, kept for training); one that hangs there too stays a verifier_error "
             "(discarded). Medians in seconds: the verifier phase on the agent's work, the control run (start, "
             "verifier, removal), the whole rollout.", "",
             "| case | statuses (reward) | verifier s | control run s | rollout s | before |",
             "|---|---|---:|---:|---:|---|"]
    before = {"solves": "success (1.0)", "agent-hangs-it": "verifier_error, discarded",
              "hangs-by-itself": "verifier_error"}
    for name, row in found.items():
        lines.append(f"| {name}: {HANG_CASES[name][2]} | {', '.join(row['statuses'])} | {row['verifier_s']:.1f} | "
                     f"{row['control_s']:.1f} | {row['total_s']:.1f} | {before[name]} |")
    lines.append("<!-- verifier-hangs:end -->")
    return "\n".join(lines) + "\n"


def put_section(path: Path, section: str) -> None:
    """Replace the marked section in ``path`` (or append it), leaving the rest of the file as it was."""
    text = path.read_text() if path.is_file() else ""
    pattern = re.compile(r"<!-- verifier-hangs:begin -->.*?<!-- verifier-hangs:end -->\n", re.S)
    path.write_text(pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n"
                    + section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier-hangs", action="store_true", help="only the verifier-hang section")
    parser.add_argument("--attempts", type=int, default=4, help="with --verifier-hangs: rollouts per case")
    args = parser.parse_args()
    out = Path(__file__).parent / "results" / "robustness.md"
    if args.verifier_hangs:
        section = hang_section(asyncio.run(verifier_hangs(args.attempts)))
        put_section(out, section)
        print(section)
        return
    timeouts = {n: asyncio.run(hung_agents(n)) for n in (2, 8)}
    output = {mb: asyncio.run(printing(mb)) for mb in (16, 32, 64)}
    worst, typical, status = asyncio.run(health_under_a_huge_prompt())
    lines = ["# Robustness benchmark", "",
             f"Machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
             f"{time.strftime('%Y-%m-%d')}. Numbers from one run of `bench/robustness.py`.", "",
             "## Agent timeouts at concurrency (3 s timeout, agents that never exit)", "",
             "| concurrent agents | seconds for all: start, 3 s of agent, kill, removal | before this change |",
             "|---|---|---|",
             f"| 2 | {timeouts[2]:.1f} | 8.3 (8 s timeout) |",
             f"| 8 | {timeouts[8]:.1f} | 91 at 6 agents (8 s timeout) |", "",
             "## Agent output (forge's cost, the last 4 MiB kept)", "",
             "| stdout | seconds | bytes kept | before |", "|---|---|---|---|"]
    before = {16: "4.4", 32: "13.6", 64: "59"}
    lines += [f"| {mb} MiB | {sec:.2f} | {kept} | {before[mb]} s |" for mb, (sec, kept) in output.items()]
    lines += ["", "## The proxy while one rollout sends a 24 MB prompt", "",
              f"Refused with HTTP {status} (context {8192} tokens); `/health` latency meanwhile: median "
              f"{typical * 1000:.1f} ms, worst {worst * 1000:.1f} ms (before: 35.9 s, the event loop blocked).", "",
              "The chaos run (`tests/integration/test_chaos.py`: 40 rollouts at concurrency 8 mixing hangs, a "
              "replaced system binary, 64 MiB of stdout, 1 GiB in /logs, huge prompts, deep JSON, crashes, an OOM, "
              "a hung verifier and writers left behind) ends every rollout in one status within its budget; "
              "forge's peak RSS there was 761 MB (bound 1500 MB)."]
    text = "\n".join(lines) + "\n"
    old = out.read_text() if out.is_file() else ""
    kept = old.find("<!-- verifier-hangs:begin -->")  # that section and its reading stay as they were
    out.write_text(text + ("\n" + old[kept:] if kept >= 0 else ""))
    print(text)


if __name__ == "__main__":
    main()
