"""Proxy benchmark: added latency and throughput of `forge proxy` vs calling the engine directly vs LiteLLM.

One run measures everything on this machine, interleaved by concurrency level, so the ratios hold
on a noisy machine (the absolute numbers are this machine's):

* upstream: a scripted vLLM stand-in (openforgerl.testing.fake_vllm) with a fixed latency,
* direct:   clients -> upstream /v1/chat/completions (streamed),
* forge:    clients -> forge proxy /v1/chat/completions -> upstream /v1/completions (token ids),
            its rollout logs on disk (one fdatasync per call, before the answer ends),
* forge-shm: the same with its logs on tmpfs (/dev/shm): the proxy's own cost without the disk flush,
* litellm:  clients -> LiteLLM proxy -> upstream /v1/chat/completions,

at 1/16/64/256 concurrent streams, with a fast engine (50 ms to the first token: a stress test of
the proxy) and at a realistic engine speed (~1 s per turn). Each stream is an agent loop: 4 calls whose history grows
(each call resends the history plus the last answer), then a new rollout. Also: bytes the proxy
stores per rollout vs the raw request/response JSON of a Codex-sized rollout.

Run: .venv/bin/python bench/proxy.py [--litellm PATH_TO_litellm] [--seconds 3]
Writes bench/results/proxy.md. Only 127.0.0.1 is contacted; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.rollout.proxy.engine import STREAM_INTERVAL  # noqa: E402
from openforgerl.rollout.proxy.shards import RESTART_PAUSE_SEC  # noqa: E402
from openforgerl.testing.ports import consecutive_ports  # noqa: E402
from openforgerl.testing.proxy import policy_template  # noqa: E402

ADMIN = "bench-admin-token"
LITELLM_KEY = "sk-bench-" + "0123456789abcdef" * 4
ANSWER = "Sure. I looked at the repository and the tests pass; next I will write the file as asked."
SYSTEM = "You are a careful coding agent working in a terminal. " * 40
LEVELS = (1, 16, 64, 256)
TURNS_PER_ROLLOUT = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_status(url: str, accept, seconds: float = 120, proc: subprocess.Popen | None = None,
                every: float = 0.05) -> float:
    """Poll ``url`` until its status passes ``accept``; returns when it did (perf_counter). Stops the bench
    when ``proc`` exits first or ``seconds`` pass."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{proc.args[:3]} exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            if accept(httpx.get(url, timeout=1).status_code):
                return time.perf_counter()
        except httpx.TransportError:
            pass
        time.sleep(every)
    raise SystemExit(f"{url} did not answer as expected within {seconds} s")


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    wait_status(url, lambda status: status < 500, seconds, proc, every=0.25)


class Stack:
    """The upstream, forge proxy and LiteLLM processes, on free loopback ports."""

    def __init__(self, tmp: Path, latency_ms: float, token_ms: float, litellm: str | None) -> None:
        self.tmp, self.procs = tmp, []
        template = policy_template()
        ids = template.encode(ANSWER) + sorted(template.stop_ids)[:1]
        (tmp / "answer.json").write_bytes(orjson.dumps(
            {"token_ids": ids, "pieces": [template.decode([i]) for i in ids[:-1]] + [""]}))
        template.tokenizer.save_pretrained(str(tmp / "tokenizer"))
        self.up_port, self.litellm_port = free_port(), free_port()
        self.upstream = f"http://127.0.0.1:{self.up_port}"
        self.litellm = f"http://127.0.0.1:{self.litellm_port}" if litellm else None
        self.data_dir = tmp / "data"
        self.shm_dir = Path(tempfile.mkdtemp(prefix="forge-bench-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else None
        self._start([sys.executable, "-m", "openforgerl.testing.fake_vllm", "--port", str(self.up_port),
                     "--answer", str(tmp / "answer.json"), "--latency-ms", str(latency_ms),
                     "--token-ms", str(token_ms)], self.upstream + "/v1/models")
        self.urls = {"direct": self.upstream, "litellm": self.litellm}
        self.pids: dict[str, int] = {"direct": self.procs[-1].pid}  # direct: the upstream's own CPU
        for name, data_dir in (("forge", self.data_dir), ("forge-shm", self.shm_dir)):
            if data_dir is None:
                continue
            port = free_port()
            self.urls[name] = f"http://127.0.0.1:{port}"
            self._start([sys.executable, "-m", "openforgerl", "proxy", "--engine", "vllm", "--engine-url",
                         self.upstream, "--port", str(port), "--admin-token", ADMIN, "--data-dir", str(data_dir),
                         "--tokenizer", str(tmp / "tokenizer")], self.urls[name] + "/health")
            self.pids[name] = self.procs[-1].pid
        self.forge = self.urls["forge"]
        if litellm:
            config = tmp / "litellm.yaml"
            config.write_text(f"""model_list:
  - model_name: smollm2
    litellm_params: {{model: openai/smollm2, api_base: "{self.upstream}/v1", api_key: "x"}}
litellm_settings: {{drop_params: true, telemetry: false}}
""")
            env = {"LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR"}
            self._start([litellm, "--config", str(config), "--host", "127.0.0.1", "--port", str(self.litellm_port),
                         "--num_workers", "1"], self.litellm + "/health/liveliness", env=env)
            self.pids["litellm"] = self.procs[-1].pid

    def _start(self, args: list[str], health: str, env: dict[str, str] | None = None) -> None:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "TRANSFORMERS_VERBOSITY": "error", **(env or {})})
        self.procs.append(proc)
        wait_healthy(health, proc)

    def stop(self) -> None:
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def new_rollout(session, url: str) -> str:
    async with session.post(url + "/rollouts", json={"metadata": {"bench": True}},
                            headers={"authorization": f"Bearer {ADMIN}"}) as resp:
        return (await resp.json())["token"]


async def one_call(session, url: str, key: str, messages: list[dict]) -> tuple[float, float, int]:
    """Seconds to the first content chunk and to [DONE]; bytes sent + received."""
    body = orjson.dumps({"model": "smollm2", "messages": messages, "stream": True, "max_tokens": 64})
    started, first = time.perf_counter(), None
    received = 0
    async with session.post(url + "/v1/chat/completions", data=body,
                            headers={"authorization": f"Bearer {key}", "content-type": "application/json"}) as resp:
        assert resp.status == 200, await resp.text()
        async for line in resp.content:
            received += len(line)
            if first is None and line.startswith(b"data: ") and b'"content":"' in line and b'"content":""' not in line:
                first = time.perf_counter()
    done = time.perf_counter()
    return (first or done) - started, done - started, len(body) + received


async def stream_worker(session, stack: Stack, path: str, url: str, stop_at: float, out: list) -> None:
    while time.perf_counter() < stop_at:
        key = await new_rollout(session, url) if path.startswith("forge") else \
            LITELLM_KEY if path == "litellm" else "x"
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Please look at the repo."}]
        for turn in range(TURNS_PER_ROLLOUT):
            if time.perf_counter() >= stop_at:
                return
            out.append(await one_call(session, url, key, messages))
            messages = messages + [{"role": "assistant", "content": ANSWER},
                                   {"role": "user", "content": f"Tool output {turn}: ok. Continue."}]


async def measure(stack: Stack, path: str, concurrency: int, seconds: float) -> dict:
    import aiohttp

    url = stack.urls[path]
    connector = aiohttp.TCPConnector(limit=concurrency + 8)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        warm: list = []
        await asyncio.gather(*(stream_worker(session, stack, path, url, time.perf_counter() + 0.5, warm)
                               for _ in range(concurrency)))
        out: list = []
        pid = stack.pids.get(path)
        cpu = cpu_seconds(pid) if pid else 0.0
        started = time.perf_counter()
        await asyncio.gather(*(stream_worker(session, stack, path, url, started + seconds, out)
                               for _ in range(concurrency)))
        wall = time.perf_counter() - started
        cpu = cpu_seconds(pid) - cpu if pid else float("nan")
    totals = sorted(t for _, t, _ in out)
    ttfts = sorted(f for f, _, _ in out)
    return {"n": len(out), "rps": len(out) / wall, "p50": pct(totals, 50), "p99": pct(totals, 99),
            "ttft50": pct(ttfts, 50), "ttft99": pct(ttfts, 99), "cpu_ms": cpu / max(1, len(out)) * 1000}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


async def paired(stack: Stack, rounds: int) -> dict[str, list[float]]:
    """Added latency at one stream, robust to a noisy machine: each round sends the same call
    directly and through each proxy back to back; the difference is that round's added latency."""
    import aiohttp

    paths = [p for p in ("forge", "forge-shm", "litellm") if stack.urls.get(p)]
    added: dict[str, list[float]] = {p: [] for p in paths}
    async with aiohttp.ClientSession() as session:
        keys = {p: LITELLM_KEY if p == "litellm" else "" for p in paths}
        for i in range(rounds):
            if i % TURNS_PER_ROLLOUT == 0:
                messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Look at the repo."}]
                for p in paths:
                    if p.startswith("forge"):
                        keys[p] = await new_rollout(session, stack.urls[p])
            _, direct, _ = await one_call(session, stack.upstream, "x", messages)
            for p in paths:
                _, through, _ = await one_call(session, stack.urls[p], keys[p], messages)
                added[p].append(through - direct)
            messages = messages + [{"role": "assistant", "content": ANSWER},
                                   {"role": "user", "content": f"Tool output {i}: ok. Continue."}]
    return {p: sorted(v) for p, v in added.items()}


async def storage(stack: Stack) -> dict:
    """A Codex-sized rollout (17k-char system, 9 tools, 10 calls with tool outputs): stored vs raw bytes."""
    import aiohttp

    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does things " * 20,
                                               "parameters": {"type": "object", "properties": {
                                                   "arg": {"type": "string", "description": "an argument"}}}}}
             for i in range(9)]
    messages = [{"role": "system", "content": "You are a coding agent. " * 700},
                {"role": "user", "content": "create a file hello.txt containing hi"}]
    raw = 0
    async with aiohttp.ClientSession() as session:
        async with session.post(stack.forge + "/rollouts", json={}, headers={"authorization": f"Bearer {ADMIN}"}) as r:
            created = await r.json()
        for call in range(10):
            body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": tools})
            async with session.post(stack.forge + "/v1/chat/completions", data=body, headers={
                    "authorization": f"Bearer {created['token']}", "content-type": "application/json"}) as r:
                answer = await r.read()
            raw += len(body) + len(answer)
            messages = messages + [orjson.loads(answer)["choices"][0]["message"],
                                   {"role": "user", "content": f"output of step {call}: " + "log line\n" * 40}]
        async with session.get(stack.forge + f"/rollouts/{created['id']}/trajectory",
                               headers={"authorization": f"Bearer {ADMIN}"}) as r:
            trajectory = await r.json()
    stored = (stack.data_dir / "rollouts" / f"{created['id']}.log").stat().st_size
    overhead = sorted(c["overhead_ms"] for c in trajectory["calls"])
    return {"raw": raw, "stored": stored, "calls": len(trajectory["calls"]), "counts": trajectory["counts"],
            "tokens": len(trajectory["segments"][0]["prompt_ids"]) + len(trajectory["segments"][0]["response_ids"]),
            "overhead_p50": statistics.median(overhead)}


async def run(stack: Stack, seconds: float, rounds: int) -> tuple[dict, dict, dict]:
    """All levels x paths; the paired rounds and the storage rollout only when ``rounds``."""
    paths = [p for p in ("direct", "forge", "forge-shm", "litellm") if stack.urls.get(p)]
    results: dict = {}
    for level in LEVELS:
        for path in paths:
            results[(path, level)] = await measure(stack, path, level, seconds)
            r = results[(path, level)]
            print(f"{path:9s} c={level:<4d} n={r['n']:<6d} {r['rps']:8.1f} req/s  p50 {r['p50']*1000:7.2f} ms  "
                  f"p99 {r['p99']*1000:7.2f} ms", flush=True)
    if not rounds:
        return results, {}, {}
    pairs = await paired(stack, rounds)
    for p, values in pairs.items():
        print(f"paired {p}: added p50 {pct(values, 50)*1000:.2f} ms p99 {pct(values, 99)*1000:.2f} ms", flush=True)
    return results, pairs, await storage(stack)


def table(title: str, results: dict, latency_ms: float, token_ms: float, seconds: float) -> list[str]:
    paths = [p for p in ("direct", "forge", "forge-shm", "litellm") if (p, LEVELS[0]) in results]
    lines = [f"## {title}", "",
             f"Upstream: {latency_ms:.0f} ms to the first token, {token_ms:.1f} ms between its "
             f"{len(policy_template().encode(ANSWER)) + 1} tokens; {seconds:.0f} s per point after 0.5 s warm-up.", "",
             "| streams | path | req/s | p50 ms | p99 ms | TTFT p50 ms | added p50 ms | added p99 ms | throughput vs direct "
             "| server CPU ms/call |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in LEVELS:
        direct = results[("direct", level)]
        for path in paths:
            r = results[(path, level)]
            added = "" if path == "direct" else f"{(r['p50'] - direct['p50']) * 1000:+.2f} | {(r['p99'] - direct['p99']) * 1000:+.2f}"
            lines.append(f"| {level} | {path} | {r['rps']:.1f} | {r['p50']*1000:.2f} | {r['p99']*1000:.2f} | "
                         f"{r['ttft50']*1000:.2f} | {added or ' | '} | {r['rps'] / direct['rps']:.2f} | "
                         f"{'' if r['cpu_ms'] != r['cpu_ms'] else format(r['cpu_ms'], '.2f')} |")
    if "litellm" in paths:
        lines += ["", "forge / LiteLLM throughput: " + ", ".join(
            f"{level} streams {results[('forge', level)]['rps'] / results[('litellm', level)]['rps']:.2f}x"
            for level in LEVELS)]
    return lines + [""]


def report(scenarios: list[tuple[str, dict, float, float, float]], pairs: dict, store: dict, args,
           litellm_version: str | None) -> str:
    lines = ["# Proxy benchmark", "",
             f"`bench/proxy.py` on this machine ({os.cpu_count()} cores, everything on it at once: clients, upstream, "
             f"proxies). Upstream: a scripted vLLM stand-in (`openforgerl.testing.fake_vllm`). Streams: agent loops "
             f"of {TURNS_PER_ROLLOUT} calls with a growing history (a ~2 kB system prompt), each call streamed. "
             f"forge proxy: one process, uvicorn+uvloop+httptools, `--engine vllm` (token ids over /v1/completions), "
             f"every call fdatasync'd to its rollout log before the answer ends (forge-shm: logs on tmpfs). "
             f"Server CPU: CPU time of that path's server process per call (direct: the upstream's own)."
             + (f" LiteLLM {litellm_version} proxy, one worker, master key." if litellm_version else ""), ""]
    for title, results, latency_ms, token_ms, seconds in scenarios:
        lines += table(title, results, latency_ms, token_ms, seconds)
    lines += ["", f"## Added latency at one stream, paired ({args.rounds} rounds, fast engine)", "",
              "Each round sends the same call directly, then through each proxy, back to back; the difference "
              "is the latency that proxy added to that call (robust to other load on the machine).", "",
              "| path | added p50 ms | added p90 ms | added p99 ms |", "|---|---:|---:|---:|"]
    for path, values in pairs.items():
        lines.append(f"| {path} | {pct(values, 50)*1000:+.2f} | {pct(values, 90)*1000:+.2f} | {pct(values, 99)*1000:+.2f} |")
    lines += ["", "## Storage per rollout", "",
              f"A Codex-sized rollout ({store['calls']} calls; 17 kB system prompt, 9 tools, tool outputs, "
              f"non-streaming, {store['tokens']} tokens in its segment; calls {store['counts']}):", "",
              "| raw request + response JSON | stored (rollout log) | ratio |", "|---:|---:|---:|",
              f"| {store['raw']:,} B | {store['stored']:,} B | {store['stored'] / store['raw']:.1%} |", "",
              f"Proxy overhead the proxy measured itself (telemetry `overhead_ms`, everything but the engine, incl. "
              f"the fdatasync): p50 {store['overhead_p50']:.2f} ms over those calls."]
    return "\n".join(lines) + "\n"


# -- at training scale (issue: every core, forked histories, long tails) ---------------------------------

AGENT_SYSTEM = ("You are Codex, a coding agent running in a terminal on the user's machine. You can read and write "
                "files, run shell commands and inspect their output. Always explain what you are about to do, keep "
                "edits small, and verify each change by running the relevant tests before you finish. ") * 38
AGENT_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name}: " + "does its job carefully. " * 12,
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "a path"},
                                                    "content": {"type": "string", "description": "text"}},
                   "required": ["path"]}}} for name in ("read_file", "write_file", "shell", "list_dir", "search")]
SCALE_TURNS = 8
SCALE_LEVELS = (1, 16, 64)


UNIQUE_OUTPUTS = False
"""``--unique-outputs``: each extending call's tool output its own words, as real ones are (otherwise every rollout
sends the same outputs, which the proxy's text and token caches then serve without rendering or tokenising)."""


_OUTPUT_DRAWS = random.Random(int.from_bytes(os.urandom(8), "big"))
"""The unique outputs' words and numbers: a generator seeded once per process from the OS (no two processes, rollouts
or calls send the same output), not ``secrets``: an OS read per draw cost ~25% of the in-process bench's CPU."""
_OUTPUT_WORDS: list[str] = []


OUTPUTS_OWN = " of its own (new words every call, as real tool outputs: nothing cached renders or tokenises it)"


def tool_output(step: int) -> str:
    """The tool output an extending call sends back for ``step``: with ``UNIQUE_OUTPUTS``, 30 lines of words drawn
    from the system prompt and a number (~4 characters a token, like logs or prose; random hex would be ~2)."""
    if UNIQUE_OUTPUTS:
        words = _OUTPUT_WORDS or _OUTPUT_WORDS.extend(AGENT_SYSTEM.split()) or _OUTPUT_WORDS
        draw = _OUTPUT_DRAWS
        lines = (f"{draw.randrange(10_000)} {' '.join(draw.choices(words, k=4))}\n" for _ in range(30))
        return f"output of step {step}: " + "".join(lines)
    return f"output of step {step}: " + "line of log\n" * 30


def agent_history(turns: int) -> list[dict]:
    """A system prompt of ~3.1k words, a task, then ``turns`` tool calls with their outputs (what Codex resends)."""
    messages = [{"role": "system", "content": AGENT_SYSTEM},
                {"role": "user", "content": "Fix the failing test in src/app.py."}]
    for i in range(turns):
        arguments = orjson.dumps({"path": f"step{i}", "content": "pytest -q"}).decode()
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "shell", "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}",
                         "content": f"output of step {i}: " + "line of log\n" * 30})
    return messages


class ScaleStack:
    """Upstream (fast scripted engine) + forge proxy with 1 worker + forge proxy with 2 workers."""

    def __init__(self, tmp: Path, latency_ms: float, token_ms: float, answer: str = ANSWER,
                 proxies: list[tuple[str, int, Path | None, list[str]]] | None = None) -> None:
        self.procs: list[subprocess.Popen] = []
        self.answer = answer
        template = policy_template()
        ids = template.encode(answer) + sorted(template.stop_ids)[:1]
        (tmp / "answer.json").write_bytes(orjson.dumps(
            {"token_ids": ids, "pieces": [template.decode([i]) for i in ids[:-1]] + [""]}))
        template.tokenizer.save_pretrained(str(tmp / "tokenizer"))
        up = free_port()
        self.upstream = f"http://127.0.0.1:{up}"
        self._start([sys.executable, "-m", "openforgerl.testing.fake_vllm", "--port", str(up), "--answer",
                     str(tmp / "answer.json"), "--latency-ms", str(latency_ms), "--token-ms", str(token_ms)],
                    self.upstream + "/v1/models")
        self.urls = {"direct": self.upstream}
        self.data_dirs: dict[str, Path] = {}
        self.pids: dict[str, list[int]] = {"direct": [self.procs[-1].pid]}
        self.plain = {"direct"}  # paths without rollouts: the upstream itself and the bare relays
        self.shm = Path(tempfile.mkdtemp(prefix="forge-bench-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else None
        if proxies is None:
            proxies = [("forge-w1", 1, tmp / "forge-w1", []), ("forge-w2", 2, tmp / "forge-w2", [])]
            proxies += [("forge-w1-shm", 1, self.shm, [])] if self.shm else []  # logs on tmpfs: without the disk
        self.tmp = tmp
        for name, workers, data_dir, extra in proxies:
            self.add_proxy(name, workers, data_dir, extra)

    def add_proxy(self, name: str, workers: int, data_dir: Path | None = None, extra: list[str] | None = None,
                  source: Path | None = None) -> float:
        """Start ``forge proxy --workers N`` as path ``name`` (``source``: the package from that checkout, e.g.
        an earlier commit's); returns seconds from spawn to a healthy /health."""
        import psutil

        data_dir = data_dir or self.tmp / name
        port = consecutive_ports(workers + 1)
        self.urls[name] = f"http://127.0.0.1:{port}"
        self.data_dirs[name] = data_dir
        started = time.perf_counter()
        self._start([sys.executable, "-m", "openforgerl", "proxy", "--engine", "vllm", "--engine-url",
                     self.upstream, "--port", str(port), "--admin-token", ADMIN, "--data-dir",
                     str(data_dir), "--tokenizer", str(self.tmp / "tokenizer"), "--workers", str(workers),
                     *(extra or [])], self.urls[name] + "/health", source)
        took = time.perf_counter() - started
        main = psutil.Process(self.procs[-1].pid)
        self.pids[name] = [main.pid] + [child.pid for child in main.children(recursive=True)]
        return took

    def add_relay(self, name: str, record: bool, server: str = "uvicorn") -> None:
        """Start the bare relay (bench/passthrough.py) as path ``name``, its log in this stack's directory."""
        import psutil

        port = free_port()
        self.urls[name] = f"http://127.0.0.1:{port}"
        record_dir = self.tmp / name
        record_dir.mkdir()
        self._start([sys.executable, str(Path(__file__).parent / "passthrough.py"), "--port", str(port),
                     "--upstream", self.upstream, "--stream-interval", str(STREAM_INTERVAL),
                     "--server", server, *(["--record", str(record_dir)] if record else [])],
                    self.urls[name] + "/health")
        main = psutil.Process(self.procs[-1].pid)
        self.pids[name] = [main.pid] + [child.pid for child in main.children(recursive=True)]
        self.plain.add(name)

    def _start(self, args: list[str], health: str, source: Path | None = None) -> None:
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
        if source is not None:  # run from there (``-m`` puts the working directory first on the path)
            env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=source)
        self.procs.append(proc)
        wait_healthy(health, proc, seconds=240)

    def cpu(self, path: str) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids[path])

    def rss_mb(self, path: str) -> float:
        return sum(int(Path(f"/proc/{pid}/statm").read_text().split()[1]) for pid in self.pids[path]) \
            * os.sysconf("SC_PAGE_SIZE") / 2**20

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.shm:
            shutil.rmtree(self.shm, ignore_errors=True)


async def scale_route(session, stack: ScaleStack, path: str) -> tuple[str, str, str]:
    """Where a new rollout on ``path`` sends its calls: (base URL, key, rollout id); direct: the upstream."""
    if path in stack.plain:
        return stack.urls[path], "x", ""
    async with session.post(stack.urls[path] + "/rollouts", json={}, headers={"authorization": f"Bearer {ADMIN}"}) as r:
        created = await r.json()
    return created.get("base_url", stack.urls[path]), created["token"], created["id"]


async def post_chat(session, base: str, key: str, body: bytes) -> bytes:
    """One chat call, read to the end (a stream to [DONE]); anything but 200 stops the bench."""
    async with session.post(base + "/v1/chat/completions", data=body, headers={
            "authorization": f"Bearer {key}", "content-type": "application/json"}) as resp:
        answer = await resp.read()
        assert resp.status == 200, answer[:300]
    return answer


async def scale_rollout(session, stack: ScaleStack, path: str, kind: str, stop_at: float, out: list,
                        stream: bool = True) -> tuple[int, int]:
    """One rollout of ``SCALE_TURNS`` calls (extending: each call resends the history plus the answer and a
    tool output; forking: the same 21 kB body every call), finished at the end; returns raw JSON bytes
    (requests + answers) and the rollout's id."""
    base, key, rollout_id = await scale_route(session, stack, path)
    messages = agent_history(12) if kind == "fork" else agent_history(0)
    raw = 0
    for turn in range(SCALE_TURNS):
        if time.perf_counter() >= stop_at:
            break
        body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": AGENT_TOOLS, "stream": stream,
                             "max_tokens": 64})
        started = time.perf_counter()
        answer = await post_chat(session, base, key, body)
        out.append(time.perf_counter() - started)
        raw += len(body) + len(answer)
        if kind == "extend":
            messages = messages + [{"role": "assistant", "content": stack.answer},
                                   {"role": "user", "content": tool_output(turn)}]
    if rollout_id:
        async with session.post(stack.urls[path] + f"/rollouts/{rollout_id}/finish", json={"reward": 0.0},
                                headers={"authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 200
    return raw, rollout_id


async def scale_point(stack: ScaleStack, path: str, kind: str, streams: int, seconds: float) -> dict:
    import aiohttp

    async def loop(session, stop_at: float, out: list) -> None:
        while time.perf_counter() < stop_at:
            await scale_rollout(session, stack, path, kind, stop_at, out)
    connector = aiohttp.TCPConnector(limit=streams + 8)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(loop(session, time.perf_counter() + 1.0, []) for _ in range(streams)))
        out: list[float] = []
        cpu, own, started = stack.cpu(path), time.process_time(), time.perf_counter()
        await asyncio.gather(*(loop(session, started + seconds, out) for _ in range(streams)))
        wall, cpu, own = time.perf_counter() - started, stack.cpu(path) - cpu, time.process_time() - own
    out.sort()
    return {"n": len(out), "rps": len(out) / wall, "p50": pct(out, 50), "p99": pct(out, 99),
            "cpu_ms": cpu / max(1, len(out)) * 1000, "clients_ms": own / max(1, len(out)) * 1000}


async def scale_paired(stack: ScaleStack, rounds: int, paths: list[str] | None = None) -> dict[str, list[float]]:
    """Added latency at one stream: each round sends the same extending call direct, then through each proxy."""
    import aiohttp

    paths = paths or [p for p in ("forge-w1", "forge-w2", "forge-w1-shm") if p in stack.urls]
    added: dict[str, list[float]] = {p: [] for p in paths}
    async with aiohttp.ClientSession() as session:
        routes: dict[str, tuple[str, str, str]] = {}
        for i in range(rounds):
            if i % SCALE_TURNS == 0:
                messages = agent_history(0)
                for p in ["direct", *paths]:
                    routes[p] = await scale_route(session, stack, p)
            body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": AGENT_TOOLS, "stream": True,
                                 "max_tokens": 64})
            times = {}
            for p, (base, key, _) in routes.items():
                started = time.perf_counter()
                await post_chat(session, base, key, body)
                times[p] = time.perf_counter() - started
            for p in paths:
                added[p].append(times[p] - times["direct"])
            messages = messages + [{"role": "assistant", "content": stack.answer},
                                   {"role": "user", "content": tool_output(i)}]
    return {p: sorted(v) for p, v in added.items()}


async def scale_storage(stack: ScaleStack) -> dict[str, dict]:
    """Stored bytes (the rollout's log) vs raw request + answer JSON, for each kind of traffic (non-streamed)."""
    import aiohttp

    found = {}
    async with aiohttp.ClientSession() as session:
        for kind in ("extend", "fork"):
            raw, rollout_id = await scale_rollout(session, stack, "forge-w1", kind, time.perf_counter() + 600, [],
                                                  stream=False)
            stored = (stack.data_dirs["forge-w1"] / "rollouts" / f"{rollout_id}.log").stat().st_size
            found[kind] = {"raw": raw, "stored": stored}
    return found


async def scale_live(stack: ScaleStack, rollouts: int = 16, calls: int = 150) -> dict[str, float]:
    """Memory of live rollouts: ``rollouts`` open rollouts of the 1-worker proxy each send the same 21 kB
    body ``calls`` times (every call a fork) and are not finished; the proxy's RSS growth per call."""
    import aiohttp

    body = orjson.dumps({"model": "smollm2", "messages": agent_history(12), "tools": AGENT_TOOLS, "max_tokens": 64})
    base = stack.urls["forge-w1"]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=rollouts + 4)) as session:
        created = []
        for _ in range(rollouts):
            async with session.post(base + "/rollouts", json={}, headers={"authorization": f"Bearer {ADMIN}"}) as r:
                created.append(await r.json())

        async def send(rollout: dict, n: int) -> None:
            for _ in range(n):
                async with session.post(rollout.get("base_url", base) + "/v1/chat/completions", data=body, headers={
                        "authorization": f"Bearer {rollout['token']}", "content-type": "application/json"}) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
        await asyncio.gather(*(send(r, 2) for r in created))  # warm: caches, buffers
        before = stack.rss_mb("forge-w1")
        await asyncio.gather(*(send(r, calls) for r in created))
        after = stack.rss_mb("forge-w1")
        for rollout in created:
            async with session.post(base + f"/rollouts/{rollout['id']}/finish", json={"reward": 0.0},
                                    headers={"authorization": f"Bearer {ADMIN}"}) as r:
                assert r.status == 200
    n = rollouts * calls
    return {"calls": n, "before_mb": before, "after_mb": after, "per_call_kb": (after - before) * 1024 / n,
            "raw_kb": len(body) / 1024}


async def scale_soak(stack: ScaleStack, seconds: float) -> list[tuple[float, int, float]]:
    """Fork-heavy traffic at 16 streams through the 1-worker proxy for ``seconds``: (time, calls, RSS MB) samples."""
    import aiohttp

    out: list[float] = []
    samples: list[tuple[float, int, float]] = []

    async def loop(session, stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            await scale_rollout(session, stack, "forge-w1", "fork", stop_at, out)

    async def sampler(stop_at: float) -> None:
        started = time.perf_counter()
        while time.perf_counter() < stop_at:
            samples.append((time.perf_counter() - started, len(out), stack.rss_mb("forge-w1")))
            await asyncio.sleep(min(max(15.0, seconds / 10), max(0.0, stop_at - time.perf_counter())))
        samples.append((time.perf_counter() - started, len(out), stack.rss_mb("forge-w1")))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
        stop_at = time.perf_counter() + seconds
        await asyncio.gather(sampler(stop_at), *(loop(session, stop_at) for _ in range(16)))
    return samples


def scale_main(args) -> None:
    latency_ms, token_ms = 20.0, 0.5
    with tempfile.TemporaryDirectory(prefix="forge-bench-scale-") as tmp:
        stack = ScaleStack(Path(tmp), latency_ms, token_ms)
        try:
            results: dict = {}
            for kind in ("extend", "fork"):
                for level in SCALE_LEVELS:
                    for path in ("direct", "forge-w1", "forge-w2"):
                        r = results[(kind, level, path)] = asyncio.run(scale_point(stack, path, kind, level,
                                                                                    args.seconds))
                        print(f"{kind:6s} {level:3d} {path:9s} {r['rps']:7.1f}/s p50 {r['p50']*1000:7.2f} "
                              f"p99 {r['p99']*1000:7.2f} cpu {r['cpu_ms']:.2f} ms/call", flush=True)
            pairs = asyncio.run(scale_paired(stack, args.rounds))
            storage = asyncio.run(scale_storage(stack))
            live = asyncio.run(scale_live(stack))
            print(f"live forks: {live}", flush=True)
            soak = asyncio.run(scale_soak(stack, args.soak)) if args.soak else []
        finally:
            stack.stop()
    lines = ["## At training scale: the 21 kB agent body, extending and forking, 1 vs 2 workers", "",
             f"`bench/proxy.py --scale{' --unique-outputs' if UNIQUE_OUTPUTS else ''}` ({os.cpu_count()} cores "
             f"shared by clients, upstream and proxies). Body: a "
             f"{len(AGENT_SYSTEM):,}-character system prompt, {len(AGENT_TOOLS)} tools and tool-call history; "
             f"extending: each of a rollout's {SCALE_TURNS} calls resends the history plus the answer and a tool "
             f"output{OUTPUTS_OWN if UNIQUE_OUTPUTS else ' (the same in every rollout)'}; forking: the same "
             f"{len(orjson.dumps({'messages': agent_history(12), 'tools': AGENT_TOOLS})):,}"
             f"-byte body every call (so every call is a new segment). Upstream: the scripted vLLM stand-in, "
             f"{latency_ms:.0f} ms to the first token, {token_ms} ms between tokens, sent to the proxies "
             f"{STREAM_INTERVAL} per chunk (the default `engine.stream_interval`; direct: a chunk per token); "
             f"each call streamed; rollouts "
             f"finished after their calls. forge-w2: `forge proxy --workers 2` (rollouts created on the admin "
             f"port, calls sent to the shard's base_url). CPU: all the path's processes, per call. {args.seconds:.0f} s "
             f"per point after 1 s warm-up.", "",
             "| traffic | streams | path | req/s | p50 ms | p99 ms | p99/p50 | throughput vs direct | proxy CPU ms/call "
             "| clients + upstream CPU ms/call |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in ("extend", "fork"):
        for level in SCALE_LEVELS:
            direct = results[(kind, level, "direct")]
            for path in ("direct", "forge-w1", "forge-w2"):
                r = results[(kind, level, path)]
                cpu = "" if path == "direct" else f"{r['cpu_ms']:.2f}"
                around = f"{r['clients_ms'] + r['cpu_ms']:.2f}" if path == "direct" else ""
                lines.append(f"| {kind} | {level} | {path} | {r['rps']:.1f} | {r['p50']*1000:.1f} | "
                             f"{r['p99']*1000:.1f} | {r['p99'] / r['p50']:.2f} | {r['rps'] / direct['rps']:.2f} "
                             f"| {cpu} | {around} |")
    top, cores = SCALE_LEVELS[-1], os.cpu_count() or 1
    lines += ["", f"What 0.9 of direct's throughput at {top} streams leaves a proxy on these {cores} cores: the "
              "clients and the upstream need their CPU per call (as measured on the direct path) for every call; "
              "the proxy gets the rest:", "",
              "| traffic | 0.9 of direct | clients + upstream | CPU left per call for the proxy |", "|---|---:|---:|---:|"]
    for kind in ("extend", "fork"):
        direct = results[(kind, top, "direct")]
        rate, around = 0.9 * direct["rps"], (direct["clients_ms"] + direct["cpu_ms"]) / 1000
        left = (cores - rate * around) / rate * 1000
        lines.append(f"| {kind} | {rate:.0f} calls/s | {rate * around:.2f} cores | {left:.2f} ms |")
    lines += ["", f"Added latency at one stream, paired ({args.rounds} rounds of extending calls, recording on; "
              "forge-w1-shm: its logs on tmpfs, i.e. without the disk's fdatasync):", "",
              "| path | added p50 ms | added p90 ms | added p99 ms |", "|---|---:|---:|---:|"]
    for path, values in pairs.items():
        lines.append(f"| {path} | {pct(values, 50)*1000:+.2f} | {pct(values, 90)*1000:+.2f} | "
                     f"{pct(values, 99)*1000:+.2f} |")
    lines += ["", "Stored bytes (the rollout's log) vs raw request + response JSON, one rollout of each kind, "
              "non-streamed:", "", "| traffic | raw JSON | stored | ratio |", "|---|---:|---:|---:|"]
    for kind, store in storage.items():
        lines.append(f"| {kind} | {store['raw']:,} B | {store['stored']:,} B | {store['stored'] / store['raw']:.2f}x |")
    lines += ["", f"Memory of live rollouts: 16 open rollouts of the 1-worker proxy each send the forking body "
              f"{live['calls'] // 16} times, unfinished ({live['calls']:,} forked calls):", "",
              "| RSS before | RSS after | growth per call | raw request per call | ratio |", "|---:|---:|---:|---:|---:|",
              f"| {live['before_mb']:.0f} MB | {live['after_mb']:.0f} MB | {live['per_call_kb']:.1f} kB | "
              f"{live['raw_kb']:.1f} kB | {live['per_call_kb'] / live['raw_kb']:.2f}x |"]
    if soak:
        lines += ["", f"RSS of the 1-worker proxy under forking traffic at 16 streams for {args.soak:.0f} s "
                  "(rollouts finished as they end):", "", "| s | calls | RSS MB |", "|---:|---:|---:|"]
        lines += [f"| {t:.0f} | {calls:,} | {rss:.0f} |" for t, calls, rss in soak]
    write_section(Path(args.out), SCALE_BEGIN, SCALE_END, lines)


SCALE_BEGIN, SCALE_END = "<!-- scale:begin -->", "<!-- scale:end -->"
RELAY_BEGIN, RELAY_END = "<!-- relay:begin -->", "<!-- relay:end -->"
RELAY_INTERVALS = (1, 4, 8, 16)


def write_section(out: Path, begin: str, end: str, lines: list[str]) -> None:
    """Replace the ``begin``..``end`` section of ``out`` (append it when there is none)."""
    text = out.read_text() if out.exists() else "# Proxy benchmark\n"
    section = "\n".join([begin, *lines, end]) + "\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end) + 1:]
    else:  # a new section goes before the first one there is (its begin marker, or its heading)
        starts = [m.start() for m in re.finditer(r"^(<!-- [\w-]+:begin -->|## )", text, re.M)]
        text = text[:starts[0]] + section + "\n" + text[starts[0]:] if starts else text + "\n" + section
    out.write_text(text)
    print(section)


def relay_main(args) -> None:
    """CPU per relayed token: long streamed answers through proxies that ask vLLM for 1, 4, 8, 16 tokens per
    chunk (``engine.stream_interval``), points interleaved over rounds, medians."""
    latency_ms, token_ms, reps = 20.0, 1.0, 10
    answer = " ".join([ANSWER] * reps)
    template = policy_template()
    n_tokens = len(template.encode(answer)) + 1
    levels = (1, 16)
    with tempfile.TemporaryDirectory(prefix="forge-bench-relay-") as tmp:
        proxies = [(f"interval-{n}", 1, None, ["-o", f"engine.stream_interval={n}"]) for n in RELAY_INTERVALS]
        stack = ScaleStack(Path(tmp), latency_ms, token_ms, answer=answer, proxies=proxies)
        got: dict = {}
        try:
            for level in levels:
                for path in stack.urls:  # warm-up
                    asyncio.run(scale_point(stack, path, "extend", level, 1.0))
            for rnd in range(args.rounds_relay):
                for level in levels:
                    for path in stack.urls:
                        r = asyncio.run(scale_point(stack, path, "extend", level, args.seconds))
                        got.setdefault((level, path), []).append(r)
                        print(f"round {rnd} {level:3d} {path:12s} {r['rps']:7.1f}/s p50 {r['p50']*1000:7.1f} "
                              f"p99 {r['p99']*1000:7.1f} cpu {r['cpu_ms']:.2f} ms/call", flush=True)
        finally:
            stack.stop()

    def med(level: int, path: str, key: str) -> float:
        return statistics.median(r[key] for r in got[(level, path)])
    lines = ["## Long answers: CPU per relayed token, and tokens per chunk from vLLM", "",
             f"`bench/proxy.py --relay` ({os.cpu_count()} cores shared by clients, upstream and proxies). Each call "
             f"of the extending agent loop (21 kB body) gets a {n_tokens}-token answer, streamed; the upstream (the "
             f"scripted vLLM stand-in) waits {latency_ms:.0f} ms, then makes a token every {token_ms:.0f} ms and "
             "sends them in chunks as vLLM does for the request's `stream_interval` (the first token alone, then "
             "that many per chunk, the rest last). One 1-worker forge proxy per setting "
             "(`-o engine.stream_interval=N`), on one upstream; direct: the client on the upstream's chat route, a chunk "
             "per token; "
             f"points of {args.seconds:.0f} s interleaved over {args.rounds_relay} rounds, medians. CPU: the "
             "proxy process per call, and that divided by the answer's tokens. (The sections from \"Fast engine\" to "
             "\"Reading\" above were measured before the proxy asked for chunks: a chunk per token.)", "",
             "| streams | tokens per chunk | req/s | p50 ms | p99 ms | proxy CPU ms/call | CPU us per token "
             "| CPU vs 1 per chunk |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        base = med(level, "interval-1", "cpu_ms")
        lines.append(f"| {level} | direct | {med(level, 'direct', 'rps'):.1f} | {med(level, 'direct', 'p50') * 1000:.1f} "
                     f"| {med(level, 'direct', 'p99') * 1000:.1f} |  |  |  |")
        for n in RELAY_INTERVALS:
            path = f"interval-{n}"
            cpu = med(level, path, "cpu_ms")
            lines.append(f"| {level} | {n} | {med(level, path, 'rps'):.1f} | {med(level, path, 'p50') * 1000:.1f} | "
                         f"{med(level, path, 'p99') * 1000:.1f} | {cpu:.2f} | {cpu / n_tokens * 1000:.1f} | "
                         f"{cpu / base:.2f} |")
    write_section(Path(args.out), RELAY_BEGIN, RELAY_END, lines)


FLOOR_BEGIN, FLOOR_END = "<!-- floor:begin -->", "<!-- floor:end -->"
FLOOR_PATHS = ("direct", "relay", "relay-rec", "forge-w1", "forge-w1-shm")


def interleaved(stack: ScaleStack, paths: list[str], levels: tuple[int, ...], rounds: int,
                seconds: float) -> dict:
    """Points of every path, extending and forking, at each level, interleaved over ``rounds`` (after a
    warm-up of each): {(kind, level, path): [point per round]}."""
    got: dict = {}
    for kind in ("extend", "fork"):
        for path in paths:
            asyncio.run(scale_point(stack, path, kind, 16, 1.0))
    for rnd in range(rounds):
        for kind in ("extend", "fork"):
            for level in levels:
                for path in paths:
                    r = asyncio.run(scale_point(stack, path, kind, level, seconds))
                    got.setdefault((kind, level, path), []).append(r)
                    print(f"round {rnd} {kind:6s} {level:3d} {path:13s} {r['rps']:7.1f}/s p50 "
                          f"{r['p50']*1000:6.1f} p99 {r['p99']*1000:6.1f} cpu {r['cpu_ms']:.2f} ms/call", flush=True)
    return got


def added_latency(pairs: dict[str, list[float]], rounds: int) -> list[str]:
    lines = ["", f"Added latency at one stream over direct, paired ({rounds} rounds of extending calls):", "",
             "| path | added p50 ms | added p90 ms | added p99 ms |", "|---|---:|---:|---:|"]
    for path, values in pairs.items():
        lines.append(f"| {path} | {pct(values, 50)*1000:+.2f} | {pct(values, 90)*1000:+.2f} | "
                     f"{pct(values, 99)*1000:+.2f} |")
    return lines


def floor_main(args) -> None:
    """forge's proxy against the least a Python proxy on the same stack does per call (bench/passthrough.py):
    points interleaved over rounds, medians; then added latency at one stream, paired."""
    latency_ms, token_ms, levels = 20.0, 0.5, (1, 16)
    with tempfile.TemporaryDirectory(prefix="forge-bench-floor-") as tmp:
        stack = ScaleStack(Path(tmp), latency_ms, token_ms, proxies=[("forge-w1", 1, None, [])])
        try:  # the relays start inside: a relay that fails to start still stops what had started
            stack.add_relay("relay", record=False)
            stack.add_relay("relay-rec", record=True)
            if stack.shm:
                stack.add_proxy("forge-w1-shm", 1, stack.shm)
            paths = [p for p in FLOOR_PATHS if p in stack.urls]
            got = interleaved(stack, paths, levels, args.rounds_floor, args.seconds)
            pairs = asyncio.run(scale_paired(stack, args.rounds, paths[1:]))
        finally:
            stack.stop()

    def med(kind: str, level: int, path: str, key: str) -> float:
        return statistics.median(r[key] for r in got[(kind, level, path)])
    lines = ["## The floor: forge against a bare Python relay on the same stack", "",
             f"`bench/proxy.py --floor` ({os.cpu_count()} cores shared by clients, upstream and proxies). The 21 kB "
             "agent body of the scale section, extending and forking, each call streamed; upstream: the scripted "
             f"vLLM stand-in, {latency_ms:.0f} ms to the first token, {token_ms} ms between tokens, "
             f"{STREAM_INTERVAL} per chunk to every path but direct. relay: `bench/passthrough.py`, the same serving "
             "stack as forge (uvicorn, uvloop, httptools, raw ASGI, aiohttp to the engine) doing the least a proxy "
             "can: read and parse the body, forward it to the upstream's chat route, relay the answer's bytes. "
             "relay-rec: the same, plus an append of request and answer to one file, fdatasync'd before the last "
             "bytes go out. forge-w1: `forge proxy` with one worker, logs on the same disk (its CPU includes "
             f"creating and finishing a rollout every {SCALE_TURNS} calls); forge-w1-shm: the same with its logs "
             f"on tmpfs, where fdatasync returns at once. Points of {args.seconds:.0f} s "
             f"interleaved over {args.rounds_floor} rounds, medians; CPU: the path's server process per call.", "",
             "| traffic | streams | path | req/s | p50 ms | p99 ms | CPU ms/call | CPU over relay-rec ms |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for kind in ("extend", "fork"):
        for level in levels:
            floor = med(kind, level, "relay-rec", "cpu_ms")
            for path in paths:
                cpu = med(kind, level, path, "cpu_ms")
                over = f"{cpu - floor:+.2f}" if path.startswith("forge") else ""
                shown_cpu = "" if path == "direct" else f"{cpu:.2f}"
                p50, p99 = med(kind, level, path, "p50") * 1000, med(kind, level, path, "p99") * 1000
                lines.append(f"| {kind} | {level} | {path} | {med(kind, level, path, 'rps'):.1f} | {p50:.1f} | "
                             f"{p99:.1f} | {shown_cpu} | {over} |")
    lines += added_latency(pairs, args.rounds)
    write_section(Path(args.out), FLOOR_BEGIN, FLOOR_END, lines)


SERVERS_BEGIN, SERVERS_END = "<!-- servers:begin -->", "<!-- servers:end -->"
SERVER_PATHS = {"relay": "uvicorn", "relay-granian": "granian", "relay-granian-rsgi": "granian-rsgi",
                "relay-raw": "raw", "relay-raw-aiohttp": "raw-aiohttp", "relay-rawclient": "uvicorn-rawclient"}


NGINX_CONF = """worker_processes 1;
error_log {root}/error.log warn;
pid {root}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {root}/body; proxy_temp_path {root}/proxy; fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
    upstream engine {{ server {upstream}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location = /health {{ return 200 '{{"status":"ok"}}'; }}
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            client_body_buffer_size 1m;
        }}
    }}
}}
"""


def add_nginx(stack: ScaleStack, name: str, nginx: str) -> None:
    """nginx (C) as path ``name``: one process, relaying bytes to the upstream without reading them (no parse,
    no ``stream_interval``: the upstream sends it a token per chunk, as it does to direct)."""
    root = stack.tmp / name
    root.mkdir()
    port = free_port()
    upstream = stack.upstream.removeprefix("http://")
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, upstream=upstream, port=port))
    stack.urls[name] = f"http://127.0.0.1:{port}"
    stack._start([nginx, "-p", str(root), "-c", str(root / "nginx.conf"), "-g", "daemon off; master_process off;"],
                 stack.urls[name] + "/health")
    stack.pids[name] = [stack.procs[-1].pid]
    stack.plain.add(name)


def servers_main(args) -> None:
    """The bare relay of the floor section (bench/passthrough.py) under uvicorn and under granian (a Rust
    HTTP server: its ASGI interface, and its own RSGI one): does a compiled HTTP front lower what a Python
    proxy costs per call? Points interleaved over rounds, medians; then added latency at one stream, paired."""
    import granian

    levels = (1, 16, 64)
    with tempfile.TemporaryDirectory(prefix="forge-bench-servers-") as tmp:
        stack = ScaleStack(Path(tmp), AB_LATENCY_MS, AB_TOKEN_MS, proxies=[])
        try:
            relays = [name for name in SERVER_PATHS if not args.relays or name in args.relays.split(",")]
            for name in relays:
                stack.add_relay(name, record=False, server=SERVER_PATHS[name])
            nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
            if nginx:
                add_nginx(stack, "relay-nginx", nginx)
            else:
                print("no nginx (apt-get install nginx-light): the compiled relay is left out", flush=True)
            paths = ["direct", *relays, *(["relay-nginx"] if nginx else [])]
            got = interleaved(stack, paths, levels, args.rounds_floor, args.seconds)
            pairs = asyncio.run(scale_paired(stack, args.rounds, paths[1:]))
        finally:
            stack.stop()
    lines = ["## The floor under other servers: the bare relay on uvicorn vs granian (Rust), without a framework, "
             "and nginx (C)", "",
             f"`bench/proxy.py --servers{' --relays ' + args.relays if args.relays else ''}` ({os.cpu_count()} cores "
             "shared by clients, upstream and relays). The bare "
             "relay of the floor section (`bench/passthrough.py`: read and parse the body, forward it, relay the "
             "answer's bytes; aiohttp to the engine, uvloop) served by relay: uvicorn with httptools (forge's "
             f"stack); relay-granian: granian {granian.__version__} (HTTP parsing and socket I/O in Rust) calling "
             "the same ASGI app; relay-granian-rsgi: granian calling the relay through its own interface (RSGI: "
             "no ASGI message dicts). One worker each, one runtime thread. relay-raw: the same relay with no framework "
             "(uvloop protocols, httptools parsing both sides, each chunk of the engine's answer written to the client "
             "from the parser's callback: no coroutine, message dict or client library per chunk); relay-raw-aiohttp: "
             "that server, towards the engine through aiohttp (a coroutine per call); relay-rawclient: uvicorn and the "
             "ASGI relay, towards the engine through the raw client (each piece handed to the coroutine by a queue). "
             "relay-nginx (when nginx is installed): "
             "nginx, one process, relaying the bytes unread (the least any proxy does; it sets no `stream_interval`, "
             "so the upstream sends it a token per chunk, as it does to direct). The 21 kB agent body, extending and "
             f"forking, each call streamed; upstream: the scripted vLLM stand-in, {AB_LATENCY_MS:.0f} ms to the first "
             f"token, {AB_TOKEN_MS} ms between tokens, {STREAM_INTERVAL} per chunk. Points of {args.seconds:.0f} s "
             f"interleaved over {args.rounds_floor} rounds, medians; CPU: the server's processes per call; "
             "ratio: CPU over uvicorn's.", "",
             "| traffic | streams | path | req/s | p50 ms | p99 ms | p99/p50 | CPU ms/call | CPU ratio |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += ratio_rows(got, paths, levels, "relay")
    lines += added_latency(pairs, args.rounds)
    write_section(Path(args.out), SERVERS_BEGIN, SERVERS_END, lines)


JOURNAL_BEGIN, JOURNAL_END = "<!-- journal:begin -->", "<!-- journal:end -->"
AB_LATENCY_MS, AB_TOKEN_MS = 20.0, 0.5  # upstream of the A/B sections: the proxy's own cost dominates


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[tuple[Path, str]]:
    """A git worktree of commit ``rev`` (an earlier proxy to run against this one) and its short id; removed after."""
    root = Path(__file__).resolve().parent.parent
    short = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev], capture_output=True, text=True,
                           check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="forge-bench-rev-") as tmp:
        path = Path(tmp) / short
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(path), rev], check=True,
                       capture_output=True)
        try:
            yield path, short
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(path)], check=False,
                           capture_output=True)


def against_baseline(args, levels: tuple[int, ...], this: str, base: str,
                     shm: str | None = None) -> tuple[list[str], dict, dict, str]:
    """This checkout's proxy as path ``this`` against the proxy of ``--baseline`` (a git worktree of that
    commit) as ``base``, both `--workers 1` with their logs on the same disk (and this checkout's on tmpfs as
    ``shm``): points interleaved over ``--rounds-journal`` rounds, then added latency at one stream, paired.
    Returns the paths, the points, the pairs and the baseline's short commit id."""
    with worktree(args.baseline) as (baseline, rev), tempfile.TemporaryDirectory(prefix="forge-bench-ab-") as tmp:
        stack = None
        try:
            stack = ScaleStack(Path(tmp), AB_LATENCY_MS, AB_TOKEN_MS, proxies=[(this, 1, None, [])])
            stack.add_proxy(base, 1, source=baseline)
            if shm and stack.shm:
                stack.add_proxy(shm, 1, stack.shm)
            paths = [p for p in ("direct", base, this, shm) if p and p in stack.urls]
            got = interleaved(stack, paths, levels, args.rounds_journal, args.seconds)
            pairs = asyncio.run(scale_paired(stack, args.rounds, paths[1:]))
        finally:
            if stack is not None:
                stack.stop()
    return paths, got, pairs, rev


def ratio_rows(got: dict, paths: list[str], levels: tuple[int, ...], base: str) -> list[str]:
    """Table rows (medians over rounds): rate, latency, tail ratio, CPU per call and its ratio to ``base``."""
    def med(kind: str, level: int, path: str, key: str) -> float:
        return statistics.median(r[key] for r in got[(kind, level, path)])
    rows = []
    for kind in ("extend", "fork"):
        for level in levels:
            base_cpu = med(kind, level, base, "cpu_ms")
            for path in paths:
                cpu = med(kind, level, path, "cpu_ms")
                p50, p99 = med(kind, level, path, "p50") * 1000, med(kind, level, path, "p99") * 1000
                shown = ("", "") if path == "direct" else (f"{cpu:.2f}", f"{cpu / base_cpu:.2f}")
                rows.append(f"| {kind} | {level} | {path} | {med(kind, level, path, 'rps'):.1f} | {p50:.1f} | "
                            f"{p99:.1f} | {p99 / p50:.2f} | {shown[0]} | {shown[1]} |")
    return rows


def journal_main(args) -> None:
    """Group commit A/B: this checkout's proxy (one journal per shard, one fdatasync per batch) against the
    proxy of ``--baseline`` (an fdatasync per rollout log per event), both with their logs on the same disk,
    and this one on tmpfs (no sync cost at all); extending and forking, points interleaved over rounds."""
    levels = (1, 16, 64)
    paths, got, pairs, rev = against_baseline(args, levels, "forge-journal", "forge-per-log", shm="forge-shm")
    lines = ["## Group commit: one journal per shard vs an fdatasync per rollout log", "",
             f"`bench/proxy.py --journal --baseline {args.baseline}` ({os.cpu_count()} cores shared by clients, "
             "upstream and proxies). The 21 kB agent body, extending and forking, each call streamed; upstream: "
             f"the scripted vLLM stand-in, {AB_LATENCY_MS:.0f} ms to the first token, {AB_TOKEN_MS} ms between "
             f"tokens. forge-per-log: `forge proxy` (1 worker) of commit {rev}, before group commit: each event "
             "written and fdatasync'd to its rollout's log. forge-journal: this checkout's, the same but its events "
             "go through one journal per shard, a batch of them per fdatasync. Both with their logs on the same "
             "disk; forge-shm: this checkout's with its logs on tmpfs, where a sync costs nothing (the bound for "
             f"any sync scheme). Points of {args.seconds:.0f} s interleaved over {args.rounds_journal} rounds, "
             "medians; CPU: the proxy process per call (it includes creating and finishing a rollout every "
             f"{SCALE_TURNS} calls).", "",
             "| traffic | streams | path | req/s | p50 ms | p99 ms | p99/p50 | CPU ms/call | CPU vs per-log |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += ratio_rows(got, paths, levels, "forge-per-log")
    lines += added_latency(pairs, args.rounds)
    write_section(Path(args.out), JOURNAL_BEGIN, JOURNAL_END, lines)


def ab_main(args) -> None:
    """One change measured: this checkout's proxy against the proxy of ``--baseline``, extending and forking
    at 16 and 64 streams (see ``against_baseline``)."""
    levels = (16, 64)
    name = re.sub(r"[^a-z0-9]+", "-", args.ab.lower()).strip("-")
    paths, got, pairs, rev = against_baseline(args, levels, "this", "baseline")
    lines = [f"## A/B: {args.ab}", "",
             f"`bench/proxy.py --ab \"{args.ab}\" --baseline {args.baseline}"
             f"{' --unique-outputs' if UNIQUE_OUTPUTS else ''}` ({os.cpu_count()} cores shared by "
             "clients, upstream and proxies). baseline: `forge proxy --workers 1` of commit "
             f"{rev}; this: the same of this checkout; logs on the same disk. The 21 kB agent body, extending "
             f"and forking, each call streamed; upstream: the scripted vLLM stand-in, {AB_LATENCY_MS:.0f} ms to "
             f"the first token, {AB_TOKEN_MS} ms between tokens. Points of {args.seconds:.0f} s interleaved over "
             f"{args.rounds_journal} rounds, medians; CPU: the proxy process per call."
             + (" Each extending call's tool output has words of its own (`--unique-outputs`): nothing cached "
                "renders or tokenises it." if UNIQUE_OUTPUTS else ""), "",
             "| traffic | streams | path | req/s | p50 ms | p99 ms | p99/p50 | CPU ms/call | CPU vs baseline |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += ratio_rows(got, paths, levels, "baseline")
    lines += added_latency(pairs, args.rounds)
    write_section(Path(args.out), f"<!-- ab-{name}:begin -->", f"<!-- ab-{name}:end -->", lines)


PROFILE_BEGIN, PROFILE_END = "<!-- profile:begin -->", "<!-- profile:end -->"
PARTS = [  # (part, what it covers, frame names that mark it): a sample is the first part, leaf upward, it hits
    ("journal", "the journal's writer thread: batching, writing, syncing", ("Journal._run", "checkpoint")),
    ("engine I/O", "the request to vLLM and parsing its token stream (forge's client, httptools, orjson)",
     ("VLLMEngine.", "_Connection.", "Response.", "Pool.")),
    ("detokenise", "token ids to text as they stream", ("HFChatTemplate.decode", "IncrementalDecoder")),
    ("plan", "render the messages, tokenise what is new, match the rollout's history",
     ("Lineage.", "HFChatTemplate.", "ProxyService._plan", "ProxyService._draft")),
    ("record", "the call's record: trajectory, encoding the log line, handing it to the journal",
     ("ProxyService.commit", "ProxyService._commit", "ProxyService.write", "Rollout.", "CallRecord.",
      "RolloutLog.", "Journal.append", "pack_")),
    ("generate", "the call's own events: tool-call parsing, budget, usage", ("ProxyService._generate",
                                                                              "ProxyService.turn")),
    ("request in", "reading and parsing the request body, routing, auth", ("parse_json", "ProxyApp._parse",
                                                                             ".parse (", "ProxyApp._model_call")),
    ("answer out", "the dialect's SSE events and uvicorn's send", ("ChatCompletions.stream", "ProxyApp._stream",
                                                                    "flushing (", ".send (", "sse (")),
    ("admin", "creating and finishing rollouts (one each per 8 calls)", ("ProxyApp._admin", "Registry.")),
    ("HTTP server", "uvicorn's protocol: parsing requests, the ASGI cycle", ("HttpToolsProtocol.", "run_asgi",
                                                                              "ProxyApp.__call__", "ProxyApp._http")),
    ("event loop", "uvloop itself: sockets, timers, task switches (no Python frame of ours)", ("Runner.run",)),
]


def _samples(raw: str):
    """(part, leaf frame, samples) per stack of a py-spy raw profile (collapsed stacks: ``frame;frame;... count``);
    a sample's part is the first one its stack hits from the leaf up."""
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")[::-1]
        part = next((name for frame in frames for name, _, marks in PARTS if any(m in frame for m in marks)),
                    "other")
        yield part, frames[0], int(count)


def print_leaves(raw: str, top: int = 25) -> None:
    """The leaf frames that took most samples, with the part each sample went to (printed, not written)."""
    leaves: dict[tuple[str, str], int] = {}
    for part, leaf, count in _samples(raw):
        leaves[(part, leaf)] = leaves.get((part, leaf), 0) + count
    total = sum(leaves.values()) or 1
    for (part, leaf), count in sorted(leaves.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {count / total * 100:5.1f}%  {part:12} {leaf}", flush=True)


def profile_parts(raw: str) -> dict[str, int]:
    """Samples per part of a py-spy raw profile."""
    got: dict[str, int] = {}
    for part, _, count in _samples(raw):
        got[part] = got.get(part, 0) + count
    return got


def profile_main(args) -> None:
    """Where a call's CPU goes in one proxy process: py-spy samples (only while the process holds the GIL,
    i.e. runs Python or C code called from it) of `forge proxy --workers 1` under the 21 kB agent body at
    16 streams, extending and forking, split into the parts of a call."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("bench/proxy.py --profile needs py-spy: pip install -e '.[bench]'")
    latency_ms, token_ms, streams, rate = 20.0, 0.5, args.profile_streams, 250
    got: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="forge-bench-profile-") as tmp:
        stack = ScaleStack(Path(tmp), latency_ms, token_ms, proxies=[("forge-w1", 1, None, [])])
        try:
            pid = stack.pids["forge-w1"][-1]  # the worker (one worker: the process itself)
            for kind in ("extend", "fork"):
                asyncio.run(scale_point(stack, "forge-w1", kind, streams, 2.0))  # warm-up
                out = Path(tmp) / f"{kind}.txt"
                sampler = subprocess.Popen([spy, "record", "--format", "raw", "-o", str(out), "--pid", str(pid),
                                            "--duration", str(int(args.seconds)), "--rate", str(rate),
                                            "--nonblocking", "--gil"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
                point = asyncio.run(scale_point(stack, "forge-w1", kind, streams, args.seconds))
                if sampler.wait(timeout=60) != 0:
                    raise SystemExit(f"py-spy could not sample pid {pid} (ptrace refused?)")
                got[kind] = {"point": point, "parts": profile_parts(out.read_text())}
                print(kind, point, got[kind]["parts"], flush=True)
                print_leaves(out.read_text())
        finally:
            stack.stop()
    lines = ["## Where a call's CPU goes" + ("" if streams == 16 else f" at {streams} stream{'s' * (streams > 1)}"), "",
             f"`bench/proxy.py --profile --seconds {args.seconds:.0f}"
             f"{'' if streams == 16 else f' --profile-streams {streams}'}` ({os.cpu_count()} cores shared by clients, "
             f"upstream and proxy). `forge proxy --workers 1` under the 21 kB agent body at {streams} streams, each "
             f"call streamed, upstream: the scripted vLLM stand-in ({latency_ms:.0f} ms to the first token, "
             f"{token_ms} ms between tokens); py-spy samples the proxy at {rate} Hz while it holds the GIL, each "
             "sample put in the first part its stack hits from the leaf up. ms/call: the part's share of the "
             "process's measured CPU per call (sampling is statistical: parts under ~3% are rough).", "",
             "| part | covers | extend % | extend ms/call | fork % | fork ms/call |", "|---|---|---:|---:|---:|---:|"]
    names = [name for name, _, _ in PARTS] + ["other"]
    covers = {name: what for name, what, _ in PARTS} | {"other": "everything else (asyncio glue, logging, GC)"}
    totals = {kind: sum(got[kind]["parts"].values()) or 1 for kind in got}
    for name in names:
        cells = []
        for kind in ("extend", "fork"):
            share = got[kind]["parts"].get(name, 0) / totals[kind]
            cells += [f"{share * 100:.1f}", f"{share * got[kind]['point']['cpu_ms']:.2f}"]
        lines.append(f"| {name} | {covers[name]} | " + " | ".join(cells) + " |")
    lines.append("| all | CPU per call of the proxy process | 100 | "
                 f"{got['extend']['point']['cpu_ms']:.2f} | 100 | {got['fork']['point']['cpu_ms']:.2f} |")
    begin, end = (PROFILE_BEGIN, PROFILE_END) if streams == 16 else (f"<!-- profile-{streams}:begin -->",
                                                                     f"<!-- profile-{streams}:end -->")
    write_section(Path(args.out), begin, end, lines)


SHARDS_BEGIN, SHARDS_END = "<!-- shards:begin -->", "<!-- shards:end -->"
TOKENIZER_LOAD = """
import json, resource, sys, time
started = time.perf_counter()
if sys.argv[1] == "AutoTokenizer":
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(sys.argv[2])
else:
    from openforgerl.rollout.proxy.template import load_chat_template
    load_chat_template("policy", sys.argv[2])
print(json.dumps({"load_s": time.perf_counter() - started, "torch": "torch" in sys.modules,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


async def first_calls(stack: ScaleStack, path: str, n: int) -> list[float]:
    """Seconds of the first call of ``n`` new rollouts, one after another, on a proxy that has served nothing:
    rollouts go to the least loaded shard, so with N workers calls 1..N are each shard's first, call N+1 is
    the first call of a rollout on a shard that has served one."""
    import aiohttp

    out = []
    body = orjson.dumps({"model": "smollm2", "messages": agent_history(0), "tools": AGENT_TOOLS, "stream": True,
                         "max_tokens": 64})
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            base, key, _ = await scale_route(session, stack, path)
            started = time.perf_counter()
            await post_chat(session, base, key, body)
            out.append(time.perf_counter() - started)
    return out


def shards_main(args) -> None:
    """What one proxy shard costs to start and keep: its tokenizer load (AutoTokenizer, as every shard did
    before, vs the proxy's loader), time to healthy and RSS of ``forge proxy --workers N``, and how long
    a shard killed with -9 takes to serve again."""
    import psutil

    rounds = args.rounds_shards
    with tempfile.TemporaryDirectory(prefix="forge-bench-shards-") as tmp:
        stack = ScaleStack(Path(tmp), 20.0, 0.5, proxies=[])
        loads: dict[str, list[dict]] = {"AutoTokenizer": [], "forge proxy": []}
        starts: dict[int, list[dict]] = {}
        restarts: list[float] = []
        try:
            for rnd in range(rounds):
                for how, got in loads.items():  # interleaved: each in a fresh process
                    started = time.perf_counter()
                    out = subprocess.run([sys.executable, "-c", TOKENIZER_LOAD, how, str(Path(tmp) / "tokenizer")],
                                         capture_output=True, text=True, check=True,
                                         env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
                    got.append({**orjson.loads(out.stdout.strip().splitlines()[-1]),
                                "wall_s": time.perf_counter() - started})
                for workers in (1, 2, 4):
                    name = f"w{workers}-r{rnd}"
                    took = stack.add_proxy(name, workers)
                    firsts = asyncio.run(first_calls(stack, name, workers + 1))
                    asyncio.run(scale_point(stack, name, "extend", 16, 2.0))  # every shard has served calls
                    mains = psutil.Process(stack.pids[name][0])
                    front = mains.memory_info().rss / 2**20
                    shards = [c for c in mains.children(recursive=True) if "openforgerl.rollout.proxy.shards"
                              in " ".join(c.cmdline())]
                    per_shard = [c.memory_info().rss / 2**20 for c in shards]
                    if not shards:  # one worker: the proxy itself, no front
                        per_shard, front = [front], 0.0
                    starts.setdefault(workers, []).append({"start_s": took, "front_mb": front,
                                                           "shard_mb": statistics.mean(per_shard),
                                                           "total_mb": front + sum(per_shard),
                                                           "first_ms": firsts[0] * 1000, "later_ms": firsts[-1] * 1000})
                    if workers == 2:  # kill -9 one shard: how long until the admin port says all are healthy
                        victim = next(c for c in shards if "shard-1.ready" in " ".join(c.cmdline()))
                        killed = time.perf_counter()
                        victim.kill()
                        wait_status(stack.urls[name] + "/health", lambda status: status == 503, 30)
                        restarts.append(wait_status(stack.urls[name] + "/health", lambda status: status == 200)
                                        - killed)
                    proc = stack.procs.pop()
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
                    print(f"round {rnd} workers {workers}: healthy after {took:.2f} s, front {front:.0f} MB, "
                          f"shards {[round(m) for m in per_shard]} MB", flush=True)
        finally:
            stack.stop()

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)
    auto, mine = loads["AutoTokenizer"], loads["forge proxy"]
    lines = ["## Memory and start-up per shard", "",
             f"`bench/proxy.py --shards` ({os.cpu_count()} cores; medians of {rounds} interleaved rounds). A proxy "
             "shard is one process per core by default, so what one costs to load and keep is paid that many times "
             "per node. Tokenizer load: a fresh Python process loads the policy tokenizer (as saved by "
             "`save_pretrained`), through AutoTokenizer, as every shard did before, and through the proxy's own "
             "loader (`load_chat_template`: the class the directory's `tokenizer_config.json` names, loaded "
             "without transformers' auto module, whose import pulls in torch).", "",
             "| tokenizer load | process wall s | load s | max RSS MB | torch imported |", "|---|---:|---:|---:|---|"]
    for how, rows in loads.items():
        lines.append(f"| {how} | {med(rows, 'wall_s'):.2f} | {med(rows, 'load_s'):.2f} | {med(rows, 'rss_mb'):.0f} "
                     f"| {'yes' if rows[0]['torch'] else 'no'} |")
    lines += ["", f"The proxy's loader vs AutoTokenizer: {med(mine, 'wall_s') / med(auto, 'wall_s'):.2f}x the wall "
              f"time, {med(mine, 'rss_mb') / med(auto, 'rss_mb'):.2f}x the memory.", "",
              "`forge proxy --workers N` (vLLM engine on the scripted stand-in, the 21 kB extending agent loop at "
              "16 streams for 2 s so every shard has served calls): spawn to a healthy `/health` on the admin port, "
              "and RSS of the admin front and of each shard. First call: the first streamed call (21 kB body) the "
              "fresh proxy serves, vs the first call of a rollout on a shard that has served one (the same body, "
              "20 ms upstream).", "",
              "| workers | start to healthy s | front RSS MB | RSS per shard MB | total RSS MB | first call ms "
              "| a later rollout's first call ms |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for workers, rows in starts.items():
        front = f"{med(rows, 'front_mb'):.0f}" if workers > 1 else "(none: one process)"
        lines.append(f"| {workers} | {med(rows, 'start_s'):.1f} | {front} | "
                     f"{med(rows, 'shard_mb'):.0f} | {med(rows, 'total_mb'):.0f} | {med(rows, 'first_ms'):.1f} | "
                     f"{med(rows, 'later_ms'):.1f} |")
    lines += ["", f"kill -9 of one shard of `--workers 2`: the admin `/health` is back to 200 after "
              f"{statistics.median(restarts):.2f} s (median of {len(restarts)}; it includes the supervisor's "
              f"{RESTART_PAUSE_SEC:.0f} s pause before a restart)."]
    write_section(Path(args.out), SHARDS_BEGIN, SHARDS_END, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement per point")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--litellm", default=shutil.which("litellm"), help="the litellm CLI (litellm[proxy])")
    parser.add_argument("--no-realistic", dest="realistic", action="store_false",
                        help="skip the second scenario (engine at ~1 s per turn)")
    parser.add_argument("--rounds", type=int, default=120, help="paired rounds at one stream")
    parser.add_argument("--levels", default="1,16,64,256", help="concurrent streams, comma-separated")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "proxy.md"))
    parser.add_argument("--scale", action="store_true",
                        help="only the training-scale section: 21 kB agent body, extend vs fork, 1 vs 2 workers "
                             "(rewrites that section of --out)")
    parser.add_argument("--soak", type=float, default=0.0, help="with --scale: seconds of the RSS soak (0: none)")
    parser.add_argument("--relay", action="store_true",
                        help="only the long-answer section: CPU per relayed token by tokens per chunk from vLLM "
                             "(rewrites that section of --out)")
    parser.add_argument("--rounds-relay", type=int, default=3, help="with --relay: interleaved rounds")
    parser.add_argument("--shards", action="store_true",
                        help="only the per-shard section: tokenizer load, start-up and RSS of --workers 1/2/4, "
                             "restart after kill -9 (rewrites that section of --out)")
    parser.add_argument("--rounds-shards", type=int, default=3, help="with --shards: interleaved rounds")
    parser.add_argument("--floor", action="store_true",
                        help="only the floor section: forge against a bare Python relay on the same stack "
                             "(rewrites that section of --out)")
    parser.add_argument("--rounds-floor", type=int, default=3, help="with --floor or --servers: interleaved rounds")
    parser.add_argument("--relays", default="", help="with --servers: only these relays (comma-separated names)")
    parser.add_argument("--servers", action="store_true",
                        help="only the servers section: the bare relay under uvicorn vs granian (ASGI, RSGI), and "
                             "nginx relaying bytes; needs granian (the bench extra), nginx if installed")
    parser.add_argument("--journal", action="store_true",
                        help="group commit A/B: this checkout's proxy against --baseline's (per-log fdatasync)")
    parser.add_argument("--baseline", default="8f95b3e", help="with --journal or --ab: the commit to compare against")
    parser.add_argument("--rounds-journal", type=int, default=3, help="with --journal or --ab: interleaved rounds")
    parser.add_argument("--unique-outputs", action="store_true",
                        help="each extending call's tool output its own words (real traffic: nothing cached)")
    parser.add_argument("--ab", metavar="NAME", help="one change A/B: this checkout's proxy against --baseline's "
                        "(writes the section 'A/B: NAME')")
    parser.add_argument("--profile-streams", type=int, default=16, help="with --profile: streams (16: its own "
                        "section; others: a section of their own)")
    parser.add_argument("--profile", action="store_true",
                        help="only the profile section: where a call's CPU goes (py-spy), extending and forking")
    args = parser.parse_args()
    global UNIQUE_OUTPUTS
    UNIQUE_OUTPUTS = args.unique_outputs
    if args.profile:
        return profile_main(args)
    if args.ab:
        return ab_main(args)
    if args.journal:
        return journal_main(args)
    if args.floor:
        return floor_main(args)
    if args.servers:
        return servers_main(args)
    if args.shards:
        return shards_main(args)
    if args.scale:
        return scale_main(args)
    if args.relay:
        return relay_main(args)
    global LEVELS
    LEVELS = tuple(int(x) for x in args.levels.split(","))
    version = None
    if args.litellm:
        probe = subprocess.run([str(Path(args.litellm).parent / "python"), "-c",
                                "import importlib.metadata as m; print(m.version('litellm'))"],
                               capture_output=True, text=True)
        version = probe.stdout.strip() or "?"
    scenarios, pairs, store = [], {}, {}
    plan = [("Fast engine (stress: the proxy's own cost dominates)", args.latency_ms, args.token_ms, args.rounds,
             args.seconds)]
    if args.realistic:  # longer points: a stream only makes a few ~1 s calls per second of measurement
        plan.append(("Realistic engine speed (~1 s per turn, like a small model on a GPU)", 400.0, 25.0, 0,
                     args.seconds * 3))
    for title, latency_ms, token_ms, rounds, seconds in plan:
        with tempfile.TemporaryDirectory(prefix="forge-bench-proxy-") as tmp:
            stack = Stack(Path(tmp), latency_ms, token_ms, args.litellm)
            try:
                print(f"== {title}", flush=True)
                results, got_pairs, got_store = asyncio.run(run(stack, seconds, rounds))
            finally:
                stack.stop()
        scenarios.append((title, results, latency_ms, token_ms, seconds))
        pairs, store = got_pairs or pairs, got_store or store
    text = report(scenarios, pairs, store, args, version)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
