"""Where one call's added latency goes at one stream: a timeline of the client's and the proxy's steps.

``bench/proxy.py`` measures the added latency at one stream (paired against direct); this shows its parts.
It runs ``forge proxy --workers 1`` in a child process with a few of its steps wrapped to note the wall
clock (the request reaching the app, each message sent to the harness, the engine's request and chunks,
the commit, the journal's queue, writer thread, write + fdatasync and the hand-back; the draft, the engine's bytes
arriving, building and applying the record), while the client
here notes its own send, the answer's head, each read and the end, against the scripted vLLM stand-in
(20 ms to the first token) on the 21 kB agent body, extending. Times are ms after the client's send,
medians over the calls (the first rollout is a warm-up).

Run: .venv/bin/python bench/proxy_trace.py [--rollouts 8]. Prints; writes nothing. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import proxy as bench  # noqa: E402

WRAP = r'''
import os, sys, time
LOG = open(os.environ["FORGE_TRACE_LOG"], "a", buffering=1)

def note(what):
    LOG.write(f"{time.time():.6f} {what}\n")

import openforgerl.rollout.proxy.app as app
import openforgerl.rollout.proxy.engines.vllm as vllm
import openforgerl.rollout.proxy.service as service
import openforgerl.rollout.proxy.store as store

http = app.ProxyApp._http
async def _http(self, scope, receive, send):
    if not scope["path"].endswith("/completions"):
        return await http(self, scope, receive, send)
    note("app: request in")
    async def noted(message):
        note(f"app: send {message['type'].rsplit('.', 1)[-1]}")
        await send(message)
    await http(self, scope, receive, noted)
app.ProxyApp._http = _http

stream = vllm.VLLMEngine.stream
async def _stream(self, prompt_ids, sampling):
    note("engine: request")
    async for chunk in stream(self, prompt_ids, sampling):
        note("engine: chunk")
        yield chunk
vllm.VLLMEngine.stream = _stream

def around(owner, name, before, after):
    inner = getattr(owner, name)
    if asyncio.iscoroutinefunction(inner):
        async def wrapped(*a, **k):
            note(before)
            try:
                return await inner(*a, **k)
            finally:
                note(after)
    else:
        def wrapped(*a, **k):
            note(before)
            try:
                return inner(*a, **k)
            finally:
                note(after)
    setattr(owner, name, wrapped)

import asyncio
around(service.ProxyService, "commit", "commit: start", "commit: end")
around(store.Journal, "append", "journal: queued", "journal: durable, back on the loop")
around(store.Journal, "_commit", "journal thread: woke with a batch", "journal thread: batch done")
around(store.Journal, "_write", "journal thread: write + fdatasync", "journal thread: synced")
around(store, "settle", "loop: settle", "loop: settled")

import openforgerl.rollout.proxy.http_client as http_client
import openforgerl.rollout.proxy.lineage as lineage
import openforgerl.rollout.proxy.rollouts as rollouts
around(lineage.Lineage, "draft", "draft: start", "draft: end")
around(http_client._Connection, "data_received", "engine: bytes in", "engine: bytes parsed")
around(service.CallState, "record", "record: build", "record: built")
around(rollouts.Rollout, "apply", "apply: start", "apply: end")

from openforgerl.cli import main
sys.argv = ["forge", *sys.argv[1:]]
main()
'''


async def drive(url: str, answer: str, rollouts: int) -> list[list[tuple[float, str]]]:
    import aiohttp

    calls: list[list[tuple[float, str]]] = []
    admin = {"authorization": f"Bearer {bench.ADMIN}"}
    async with aiohttp.ClientSession() as session:
        for _ in range(rollouts):
            async with session.post(url + "/rollouts", json={}, headers=admin) as r:
                key = (await r.json())["token"]
            messages = bench.agent_history(0)
            for turn in range(4):
                body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": bench.AGENT_TOOLS,
                                     "stream": True, "max_tokens": 64})
                marks = [(time.time(), "client: send")]
                async with session.post(url + "/v1/chat/completions", data=body, headers={
                        "authorization": f"Bearer {key}", "content-type": "application/json"}) as resp:
                    marks.append((time.time(), "client: head"))
                    async for _data, _ in resp.content.iter_chunks():
                        marks.append((time.time(), "client: read"))
                marks.append((time.time(), "client: end"))
                calls.append(marks)
                messages = messages + [{"role": "assistant", "content": answer},
                                       {"role": "user", "content": f"output of step {turn}: " + "line of log\n" * 30}]
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts of 4 calls (the first is a warm-up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forge-bench-trace-") as tmp:
        stack = bench.ScaleStack(Path(tmp), 20, 0.5, proxies=[])
        wrapper, log = Path(tmp) / "traced_proxy.py", Path(tmp) / "trace.log"
        wrapper.write_text(WRAP)
        port = bench.free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "FORGE_TRACE_LOG": str(log), "TRANSFORMERS_VERBOSITY": "error"}
        proc = subprocess.Popen([sys.executable, str(wrapper), "proxy", "--engine", "vllm", "--engine-url",
                                 stack.upstream, "--port", str(port), "--admin-token", bench.ADMIN, "--data-dir",
                                 str(Path(tmp) / "data"), "--tokenizer", str(Path(tmp) / "tokenizer"),
                                 "--workers", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            bench.wait_healthy(url + "/health", proc)
            calls = asyncio.run(drive(url, stack.answer, args.rollouts))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            stack.stop()
        proxy_marks = sorted((float(t), what) for t, _, what in
                             (line.partition(" ") for line in log.read_text().splitlines()))
    shapes: dict[tuple[str, ...], list[list[float]]] = {}
    for marks in calls[4:]:  # the first rollout warms up
        start, end = marks[0][0], marks[-1][0]
        seen: dict[str, int] = {}
        names, times = [], []
        for t, what in sorted(marks + [m for m in proxy_marks if start <= m[0] <= end]):
            seen[what] = seen.get(what, 0) + 1
            names.append(what if seen[what] == 1 else f"{what} ({seen[what]})")
            times.append((t - start) * 1000)
        shapes.setdefault(tuple(names), []).append(times)
    print(f"{len(calls) - 4} calls; ms after the client's send, medians, per order of steps (the engine's answer "
          "comes in one chunk or more)")
    for names, runs in sorted(shapes.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(runs)} calls:")
        for i, name in enumerate(names):
            print(f"{statistics.median(run[i] for run in runs):9.3f}  {name}")

if __name__ == "__main__":
    main()
