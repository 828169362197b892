"""Rollouts at once under a login shell's limit of open files: how many harnesses a proxy serves.

Each harness in flight holds a connection to the proxy, the proxy one to the engine for the call and its
rollout's log file. This starts `forge proxy --workers 1 --engine vllm` (this checkout's, and with ``--against
REV`` that commit's too) with a soft limit of open files of ``--soft`` (1024: a login shell's usual; the hard
limit as this machine has it) in front of the scripted vLLM stand-in (each answer after ``--engine-ms``, so the
calls are all in flight at once), creates ``--rollouts`` rollouts, then sends one streamed call per rollout, all
at once, each on its own connection; it counts the rollouts created and the calls answered whole.

Run: .venv/bin/python bench/proxy_open_files.py [--against REV] [--rollouts 600,1500] [--out bench/results/proxy.md]
Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import proxy as bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- open-files:begin -->", "<!-- open-files:end -->"
HARD_BEGIN, HARD_END = "<!-- open-files-hard:begin -->", "<!-- open-files-hard:end -->"


def start_proxy(checkout: Path, tmp: Path, upstream: str, soft: int,
                hard: int | None = None) -> tuple[subprocess.Popen, str]:
    port = bench.free_port()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    proc = subprocess.Popen([sys.executable, "-m", "openforgerl", "proxy", "--engine", "vllm", "--engine-url",
                             upstream, "--port", str(port), "--admin-token", bench.ADMIN, "--data-dir",
                             str(tmp / f"data-{port}"), "--tokenizer", str(tmp / "tokenizer"), "--workers", "1"],
                            preexec_fn=limit, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(checkout), "TRANSFORMERS_VERBOSITY": "error"})
    url = f"http://127.0.0.1:{port}"
    bench.wait_healthy(url + "/health", proc)
    return proc, url


async def harnesses(url: str, n: int) -> dict:
    import httpx

    admin = {"authorization": f"Bearer {bench.ADMIN}"}
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=n + 10)) as client:
        created = []
        for _ in range(n):
            try:
                answer = await client.post(url + "/rollouts", json={}, headers=admin)
                created.append(answer.json().get("token") if answer.status_code == 200 else None)
            except httpx.TransportError:
                created.append(None)
        body = orjson.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "stream": True})

        async def call(token: str) -> str:
            try:
                answer = await client.post(url + "/v1/chat/completions", content=body, headers={
                    "authorization": f"Bearer {token}", "content-type": "application/json"})
            except httpx.TransportError as exc:
                return f"connection: {type(exc).__name__}"
            if answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]"):
                return "ok"
            return f"HTTP {answer.status_code}"
        started = time.perf_counter()
        outcomes = Counter(await asyncio.gather(*(call(token) for token in created if token)))
        return {"created": sum(t is not None for t in created), "outcomes": outcomes,
                "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REV", help="also that commit's proxy (before a change)")
    parser.add_argument("--rollouts", default="600,1500", help="rollouts at once, comma-separated")
    parser.add_argument("--soft", type=int, default=1024, help="the proxy's soft limit of open files at start")
    parser.add_argument("--hard", type=int, help="also the proxy's hard limit (its own section of --out)")
    parser.add_argument("--engine-ms", type=float, default=2000.0, help="the stand-in's time to its answer")
    parser.add_argument("--out", help="write the section to this markdown file")
    args = parser.parse_args()
    levels = [int(x) for x in args.rollouts.split(",")]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the bench's own clients: one connection each
    rows = []
    with contextlib.ExitStack() as trees, tempfile.TemporaryDirectory(prefix="forge-bench-files-") as tmp_name:
        tmp = Path(tmp_name)
        checkouts = {"this": ROOT}
        if args.against:
            tree, short = trees.enter_context(bench.worktree(args.against))
            checkouts[short] = tree
        stack = bench.ScaleStack(tmp, args.engine_ms, 0.0, proxies=[])
        try:
            for name, checkout in checkouts.items():
                for n in levels:
                    proc, url = start_proxy(checkout, tmp, stack.upstream, args.soft, args.hard)
                    try:
                        limits = Path(f"/proc/{proc.pid}/limits").read_text().split("Max open files")[1].split()
                        got = asyncio.run(harnesses(url, n))
                    finally:
                        proc.terminate()
                        proc.wait(timeout=60)
                    rows.append((name, n, limits[0], got))
                    print(name, n, limits[0], got, flush=True)
        finally:
            stack.stop()
    title = (f"## Rollouts at once with a hard limit of {args.hard} open files" if args.hard else
             "## Rollouts at once under a login shell's limit of open files")
    lines = [title, "",
             f"`bench/proxy_open_files.py{' --against ' + args.against if args.against else ''} --rollouts "
             f"{args.rollouts} --soft {args.soft}{f' --hard {args.hard}' if args.hard else ''}` ({os.cpu_count()} "
             f"cores; hard limit {args.hard or hard}). "
             f"`forge proxy --workers 1 --engine vllm` started with a soft limit of {args.soft} open files, in "
             f"front of the scripted vLLM stand-in (each answer after {args.engine_ms:.0f} ms, so every call is in "
             "flight at once); the rollouts created one after another, then one streamed call per rollout, all "
             "at once, each on its own connection.", "",
             "| proxy | rollouts | soft limit once started | created | answered whole | failed | how | seconds |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    for name, n, soft, got in rows:
        failed = {k: v for k, v in got["outcomes"].items() if k != "ok"}
        lines.append(f"| {name} | {n} | {soft} | {got['created']} | {got['outcomes'].get('ok', 0)} | "
                     f"{n - got['outcomes'].get('ok', 0)} | "
                     + (", ".join(f"{k}: {v}" for k, v in sorted(failed.items())) or "")
                     + (f"{', ' if failed else ''}not created: {n - got['created']}" if got["created"] < n else "")
                     + f" | {got['seconds']:.1f} |")
    print("\n".join(lines))
    if args.out:
        begin, end = (BEGIN, END) if not args.hard else (HARD_BEGIN, HARD_END)
        bench.write_section(Path(args.out), begin, end, lines)


if __name__ == "__main__":
    main()
