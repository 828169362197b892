"""vLLM on CPU: which cores its worker computes on (``VllmConfig.cpu_threads_bind``), side by side in one run.

vLLM's own choice ("auto") keeps one core for its API server process and binds the worker's threads to the
rest: on a 2-core machine it computes on one core. forge's default on a machine with at most 4 CPUs binds all
of them. For each setting the bench starts the server through ``forge serve`` (the same code path as every
user) and times, on SmolLM2 (fp32, the default model):

- prefill: one completion of a fresh ~3,000-token prompt, one token out (no prefix-cache hit);
- decode, one stream: 128 tokens (ignore_eos);
- decode, four streams at once: 64 tokens each.

Ratios are "all CPUs / auto" (below 1 is faster). Machines here are noisy: read them with the one-run caveat.

Run: .venv/bin/python bench/vllm_cpu_threads.py   (~6 min on 2 cores; stops any server forge started first)
Writes bench/results/vllm_cpu_threads.md (the measured table; a hand-written reading below it is kept).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "vllm_cpu_threads.md"
WORDS = "river stone cloud lamp orange window music paper forest engine button garden".split()


def forge(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"forge {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def complete(url: str, prompt: str, tokens: int) -> float:
    began = time.monotonic()
    answer = httpx.post(f"{url}/completions", timeout=900, json={
        "model": "smollm2", "prompt": prompt, "max_tokens": tokens, "temperature": 1.0, "ignore_eos": True})
    answer.raise_for_status()
    return time.monotonic() - began


def measure(bind: str) -> dict[str, float]:
    forge("serve", "--stop", env={})
    url = forge("serve", "--model", "smollm2", "--cpu-threads-bind", bind, env={})
    complete(url, "Hello", 4)  # warm
    prompt = " ".join(random.Random(os.urandom(8)).choice(WORDS) for _ in range(3000))
    prefill = complete(url, prompt, 1)
    decode = complete(url, "Once upon a time", 128)
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: complete(url, f"Story {i}:", 64), range(4)))
    four = time.monotonic() - began
    forge("serve", "--stop", env={})
    return {"prefill 3,000 tokens (s)": prefill, "decode 128 tokens, 1 stream (s)": decode,
            "decode 4 x 64 tokens, 4 streams (s)": four}


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    every = ",".join(map(str, cpus))
    auto, mine = measure("auto"), measure(every)
    rows = [f"| {name} | {auto[name]:.1f} | {mine[name]:.1f} | {mine[name] / auto[name]:.2f} |" for name in auto]
    table = "\n".join([f"| measure | auto (vLLM's choice) | all CPUs ({every}) | ratio |", "|---|---|---|---|", *rows])
    print(table)
    stamp = time.strftime("%Y-%m-%d")
    measured = (f"<!-- measured:begin -->\n## {stamp}, {len(cpus)} CPUs, SmolLM2 fp32\n\n{table}\n"
                f"<!-- measured:end -->")
    if RESULTS.exists() and "<!-- measured:end -->" in RESULTS.read_text():
        head, rest = RESULTS.read_text().split("<!-- measured:begin -->", 1)
        text = head + measured + rest.split("<!-- measured:end -->", 1)[1]
    else:
        text = f"# vLLM on CPU: the cores its worker computes on (`bench/vllm_cpu_threads.py`)\n\n{measured}\n"
    RESULTS.write_text(text)
    print(json.dumps({"auto": auto, "all": mine}))


if __name__ == "__main__":
    main()
