"""The proxy app's own CPU per call, in one process: no sockets, no other process on the cores.

``bench/proxy.py`` measures the proxy as harnesses see it (clients, the proxy and a vLLM stand-in sharing 2
cores over loopback); its CPU numbers swing ~5-10% between runs, more than most single changes to the
proxy's own path are worth. This drives the real ASGI app (``build_app``: the smollm2 template, rollout logs
and the group-commit journal on disk) straight from Python: ``STREAMS`` agent loops at once, each a rollout
of 8 streamed calls on the 21 kB agent body (extending: each call resends the history plus the answer and a
tool output; forking: the same body every call), created and finished through the admin routes. The engine
answers at once with the bench's 21-token answer in chunks as vLLM sends them (the first token alone, then
``STREAM_INTERVAL`` per chunk), each chunk after a turn of the event loop. What is left out: the HTTP server
(uvicorn), the engine's HTTP client and the socket writes; what is measured is everything of forge's between
them (routing, auth, planning, the engine's events, tool-call parsing, the dialect's SSE, recording,
durability's bookkeeping). CPU: the process's (all threads: the journal's writer, planning workers).

A/B: ``--against REV`` runs the same driver on a worktree of commit REV at the same time (one app per core),
each round, and prints the median of the rounds' ratios.
``--worker-heap`` runs this checkout's app twice at once, each in a process that first imports veRL's agent-loop
module (the heap of the worker where the training loop runs a proxy app per rollout): Python's GC as is against
the heap settled (``settle_heap``), with the calls' times and the collections.
Run: .venv/bin/python bench/proxy_app.py [--against REV] [--this REV] [--rounds 5] [--out FILE]
     .venv/bin/python bench/proxy_app.py --worker-heap [--rounds 5] [--out bench/results/proxy.md]
Only this process is involved: no network at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
STREAMS = 16
CALLS_PER_ROLLOUT = 8
ADMIN = "bench-admin-token"


def child(kind: str, seconds: float, streams: int, heap: str = "app", gc_mode: str = "settled",
          live: tuple[int, int] | None = None, unique: bool = False, wide: tuple[int, int] | None = None) -> dict:
    """One measurement, in this process, of the openforgerl on ``sys.path``. ``heap`` "verl": veRL's agent-loop
    module imported first (torch, veRL, Ray: the heap of the worker the training loop's proxies run in);
    ``gc_mode`` "settled": the heap settled as `forge proxy` does once built, "default": Python's GC as is.
    ``live`` (rollouts, calls): instead, the memory that many open rollouts hold after that many calls each.
    ``unique``: each extending call's tool output its own (``bench/proxy.py``'s ``tool_output``: as real ones,
    nothing cached renders or tokenises it), not the same output in every rollout. ``wide`` (rollouts, calls):
    instead, CPU per call of that many open rollouts taking turns, one extending call each a turn (``streams`` at
    a time), until each made that many; measured over the second half of the turns."""
    import gc

    if heap == "verl":
        import openforgerl.train.verl.agent_loop  # noqa: F401
    import uvloop

    from openforgerl.rollout.proxy import server
    from openforgerl.rollout.proxy.config import ProxyConfig
    from openforgerl.rollout.proxy.engine import STREAM_INTERVAL, Engine, Generation, TokenChunk

    # this checkout's request driver, whichever commit's app it drives (the file imports nothing of openforgerl)
    spec = importlib.util.spec_from_file_location("forge_asgi_call", ROOT / "openforgerl" / "testing" / "asgi.py")
    assert spec is not None and spec.loader is not None
    asgi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(asgi)
    AsgiCall = asgi.AsgiCall

    sys.path.insert(0, str(ROOT / "bench"))
    import proxy as bench  # the bench's own body, answer and tool outputs
    from proxy import AGENT_TOOLS, ANSWER, agent_history, tool_output

    bench.UNIQUE_OUTPUTS = unique or live is not None or wide is not None  # open rollouts: each output its own

    class ChunkedEngine(Engine):
        """The answer at once, in vLLM's chunks, a loop turn apart."""

        def __init__(self, ids: list[int]) -> None:
            self.ids, self.logprobs = ids, [-0.5] * len(ids)

        async def generate(self, prompt_ids, sampling):
            return Generation(list(self.ids), list(self.logprobs), "stop")

        async def stream(self, prompt_ids, sampling):
            ids, logprobs, start = self.ids, self.logprobs, 0
            for end in [1, *range(1 + STREAM_INTERVAL, len(ids), STREAM_INTERVAL), len(ids)]:
                await asyncio.sleep(0)
                yield TokenChunk(ids[start:end], logprobs[start:end], "stop" if end == len(ids) else None)
                start = end

    async def call(app, method: str, path: str, token: str, body: bytes) -> tuple[int, bytes]:
        done = await AsgiCall(method, path, token, body)(app)
        return done.status, done.content

    async def one_rollout(app, answer: str, counts: list[int], took: list[float] | None = None,
                          calls: int = CALLS_PER_ROLLOUT, finish: bool = True) -> int:
        """One rollout's calls (then its finish); the bytes of its requests and answers."""
        status, created = await call(app, "POST", "/rollouts", ADMIN, b'{"metadata": {}}')
        assert status == 200, created
        created = orjson.loads(created)
        messages = agent_history(12) if kind == "fork" else agent_history(0)
        raw = 0
        for turn in range(calls):
            body = orjson.dumps({"model": "smollm2", "messages": messages, "tools": AGENT_TOOLS,
                                 "stream": True, "max_tokens": 64})
            began = time.perf_counter()
            status, sent = await call(app, "POST", "/v1/chat/completions", created["token"], body)
            assert status == 200 and sent.endswith(b"data: [DONE]\n\n"), sent[-300:]
            counts[0] += 1
            raw += len(body) + len(sent)
            if took is not None:
                took.append(time.perf_counter() - began)
            if kind == "extend":
                messages = messages + [{"role": "assistant", "content": answer},
                                       {"role": "user", "content": tool_output(turn)}]
        if finish:
            status, _ = await call(app, "POST", f"/rollouts/{created['id']}/finish", ADMIN, b'{"reward": 0.0}')
            assert status == 200
        return raw

    async def loop_one(app, stop_at: float, answer: str, counts: list[int], took: list[float] | None = None) -> None:
        while time.perf_counter() < stop_at:
            await one_rollout(app, answer, counts, took)

    async def live_memory(app, rollouts: int, calls: int) -> dict:
        """RSS per open rollout after ``calls`` calls each (``streams`` rollouts at a time, none finished): the
        growth over ``rollouts`` of them opened after twice as many others (by then the template's token and
        text caches, bounded and shared by all rollouts, are full: what is left is what each rollout holds)."""
        import tracemalloc

        slots = asyncio.Semaphore(streams)

        async def opened() -> int:
            async with slots:
                return await one_rollout(app, ANSWER, [0], calls=calls, finish=False)
        def settled() -> int:  # what Python holds, without the template's caches
            for cache in ("_turns", "_texts"):
                getattr(app.service.template, cache).clear()
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        await asyncio.gather(*(opened() for _ in range(2 * rollouts)))
        tracemalloc.start()
        heap = settled()
        raw = await asyncio.gather(*(opened() for _ in range(rollouts)))
        heap_after = settled()
        tracemalloc.stop()
        return {"rollouts": rollouts, "calls": calls, "kb_per_rollout": (heap_after - heap) / rollouts / 1024,
                "raw_kb_per_rollout": statistics.mean(raw) / 1024, "ratio": (heap_after - heap) / sum(raw)}

    async def taking_turns(app, rollouts: int, calls: int) -> dict:
        """CPU per call of ``rollouts`` open rollouts taking turns: every rollout's history is in every turn, so
        the template's shared caches, once the histories outgrow them, keep turning over."""
        slots = asyncio.Semaphore(streams)
        tokens, histories = [], []
        for _ in range(rollouts):
            status, created = await call(app, "POST", "/rollouts", ADMIN, b'{"metadata": {}}')
            assert status == 200, created
            tokens.append(orjson.loads(created)["token"])
            histories.append(agent_history(0))

        async def turn(i: int, step: int) -> None:
            async with slots:
                body = orjson.dumps({"model": "smollm2", "messages": histories[i], "tools": AGENT_TOOLS,
                                     "stream": True, "max_tokens": 64})
                status, sent = await call(app, "POST", "/v1/chat/completions", tokens[i], body)
                assert status == 200 and sent.endswith(b"data: [DONE]\n\n"), sent[-300:]
                histories[i] = histories[i] + [{"role": "assistant", "content": ANSWER},
                                               {"role": "user", "content": tool_output(step)}]
        cpu = wall = 0.0
        for step in range(calls):
            if step == calls // 2:
                cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(turn(i, step) for i in range(rollouts)))
        measured = rollouts * (calls - calls // 2)
        return {"rollouts": rollouts, "calls": calls, "cpu_ms": (time.process_time() - cpu) / measured * 1000,
                "calls_s": measured / (time.perf_counter() - wall),
                "history_kb": statistics.mean(len(orjson.dumps(h)) for h in histories) / 1024}

    async def main() -> dict:
        with tempfile.TemporaryDirectory(prefix="forge-bench-app-") as tmp:
            config = ProxyConfig(admin_token=ADMIN, model="smollm2", data_dir=tmp)
            app = await asyncio.to_thread(server.build_app, config)
            if gc_mode == "settled":
                server.settle_heap()  # as `forge proxy` does once built: the start-up heap frozen, its GC thresholds
            template = app.service.template
            app.service.engine = ChunkedEngine(template.encode(ANSWER) + [min(template.stop_ids)])
            if live is not None or wide is not None:
                got = await (live_memory(app, *live) if live is not None else taking_turns(app, *wide))  # type: ignore[misc]
                await app.service.aclose()
                app.registry.close()
                return got
            counts = [0]
            warm = time.perf_counter() + 1.0
            await asyncio.gather(*(loop_one(app, warm, ANSWER, counts) for _ in range(streams)))
            counts[0], took, pauses = 0, [], []  # calls' wall times; collections: (generation, seconds)

            def collecting(phase: str, info: dict, began: list[float] = [0.0]) -> None:  # noqa: B006
                if phase == "start":
                    began[0] = time.perf_counter()
                else:
                    pauses.append((info["generation"], time.perf_counter() - began[0]))
            gc.callbacks.append(collecting)
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(loop_one(app, wall + seconds, ANSWER, counts, took) for _ in range(streams)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            gc.callbacks.remove(collecting)
            await app.service.aclose()
            app.registry.close()
            took.sort()
            full = [s for generation, s in pauses if generation == 2]
            return {"calls": counts[0], "cpu_ms": cpu / counts[0] * 1000, "calls_s": counts[0] / wall,
                    "p50_ms": took[len(took) // 2] * 1000, "p99_ms": took[int(len(took) * 0.99)] * 1000,
                    "max_ms": took[-1] * 1000, "gc_ms_call": sum(s for _, s in pauses) / counts[0] * 1000,
                    "full_gcs": len(full), "full_gc_ms": max(full, default=0.0) * 1000,
                    "heap_objects": len(gc.get_objects()) + gc.get_freeze_count()}

    return uvloop.run(main())


def start(checkout: Path, kind: str, seconds: float, streams: int, heap: str = "app",
          gc_mode: str = "settled", live: str | None = None, unique: bool = False,
          wide: str | None = None) -> subprocess.Popen:
    """``child`` in a fresh interpreter importing ``checkout``'s openforgerl."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", kind, "--seconds",
                             str(seconds), "--streams", str(streams), "--heap", heap, "--gc", gc_mode,
                             *(["--live", live] if live else []), *(["--wide", wide] if wide else []),
                             *(["--unique"] if unique else [])], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=checkout)


def result(proc: subprocess.Popen, checkout: Path, seconds: float) -> dict:
    out, err = proc.communicate(timeout=seconds * 10 + 120)
    if proc.returncode != 0:
        raise SystemExit(f"the driver failed on {checkout}:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=("extend", "fork"), help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement per point")
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    parser.add_argument("--against", metavar="REV", help="A/B: also run commit REV's app, interleaved")
    parser.add_argument("--this", metavar="REV", help="run commit REV's app as this one (default: the working tree)")
    parser.add_argument("--name", default="", help="with --against: the change's name, for --out")
    parser.add_argument("--out", help="append the table to this markdown file")
    parser.add_argument("--heap", choices=("app", "verl"), default="app", help=argparse.SUPPRESS)
    parser.add_argument("--gc", choices=("settled", "default"), default="settled", help=argparse.SUPPRESS)
    parser.add_argument("--unique", action="store_true",
                        help="extending calls bring tool outputs of their own (real traffic: no cache hits)")
    parser.add_argument("--live", metavar="ROLLOUTS,CALLS",
                        help="memory of open rollouts: ROLLOUTS of CALLS extending calls each, none finished (this "
                             "checkout, and --against REV's; the section 'Live rollouts in memory' of --out)")
    parser.add_argument("--wide", metavar="ROLLOUTS,CALLS",
                        help="CPU per call of ROLLOUTS open rollouts taking turns until each made CALLS extending "
                             "calls (this checkout and --against REV's at once; the section 'Many open rollouts "
                             "taking turns' of --out)")
    parser.add_argument("--worker-heap", action="store_true",
                        help="the app in a veRL agent-loop worker's heap: Python's GC as is vs settled (the section "
                             "'The proxy in an agent-loop worker's heap' of --out)")
    args = parser.parse_args()
    if args.child:
        live = tuple(int(x) for x in args.live.split(",")) if args.live else None
        wide = tuple(int(x) for x in args.wide.split(",")) if args.wide else None
        print(json.dumps(child(args.child, args.seconds, args.streams, args.heap, args.gc, live,  # type: ignore[arg-type]
                               args.unique, wide)))  # type: ignore[arg-type]
        return
    if args.live:
        return live_main(args)
    if args.wide:
        return wide_main(args)
    if args.worker_heap:
        return worker_heap_main(args)
    sys.path.insert(0, str(ROOT / "bench"))
    import proxy as bench  # its worktrees of earlier commits

    with contextlib.ExitStack() as trees:
        paths = {"this": ROOT}
        if args.this:
            tree, short = trees.enter_context(bench.worktree(args.this))
            paths = {f"this ({short})": tree}
        if args.against:
            tree, short = trees.enter_context(bench.worktree(args.against))
            paths[short] = tree
        got: dict[tuple[str, str], list[dict]] = {}
        for round_ in range(args.rounds):
            for kind in ("extend", "fork"):
                # the apps run at the same time, one per core: what slows this machine down (other tenants of
                # its host) slows both, and the ratio of a round holds where sequential runs swing 15%
                procs = {name: start(checkout, kind, args.seconds, args.streams, unique=args.unique)
                         for name, checkout in paths.items()}
                for name, proc in procs.items():
                    got.setdefault((kind, name), []).append(result(proc, paths[name], args.seconds))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    ref_name = list(paths)[-1]
    lines = [f"| traffic | app | calls/s | CPU ms/call | CPU per round | vs {ref_name}, median of rounds |",
             "|---|---|---:|---:|---|---:|"]
    for kind in ("extend", "fork"):
        for name in paths:
            runs, refs = got[(kind, name)], got[(kind, ref_name)]
            ratio = statistics.median(r["cpu_ms"] / b["cpu_ms"] for r, b in zip(runs, refs, strict=True))
            lines.append(f"| {kind} | {name} | {statistics.median(r['calls_s'] for r in runs):.0f} | "
                         f"{statistics.median(r['cpu_ms'] for r in runs):.3f} | "
                         + " ".join(f"{r['cpu_ms']:.3f}" for r in runs) + f" | {ratio:.3f}x |")
    print("\n".join(lines))
    if args.out:
        head = [f"### In-process A/B: {args.name or 'this checkout'}", "",
                f"`bench/proxy_app.py{' --this ' + args.this if args.this else ''}"
                f"{' --against ' + args.against if args.against else ''} --rounds {args.rounds} "
                f"--seconds {args.seconds:g}{' --unique' if args.unique else ''}` ({os.cpu_count()} cores; one "
                f"process: {args.streams} agent loops straight into the ASGI app, the engine answering at once"
                f"{'; each tool output its own words' if args.unique else ''}; both apps at once in each round, "
                "the ratio the median of the rounds' ratios).", ""]
        with open(args.out, "a") as out:
            out.write("\n".join(head + lines) + "\n\n")


def checkouts(trees: contextlib.ExitStack, against: str | None) -> dict[str, Path]:
    """This checkout, and a worktree of commit ``against`` under its short hash (removed when ``trees`` closes)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import proxy as bench

    paths = {"this": ROOT}
    if against:
        tree, short = trees.enter_context(bench.worktree(against))
        paths[short] = tree
    return paths


LIVE_BEGIN, LIVE_END = "<!-- live-extend:begin -->", "<!-- live-extend:end -->"


def live_main(args) -> None:
    """RSS per open rollout of extending traffic, this checkout (and ``--against REV``), one child each, in turn."""
    sys.path.insert(0, str(ROOT / "bench"))
    import proxy as bench

    rows = []
    with contextlib.ExitStack() as trees:
        paths = checkouts(trees, args.against)
        for round_ in range(args.rounds):
            for name, checkout in paths.items():
                rows.append((name, result(start(checkout, "extend", 0, args.streams, live=args.live), checkout, 60)))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    lines = ["| app | open rollouts | calls each | raw request + answer per rollout | held per open rollout | "
             "ratio | ratio per round |", "|---|---:|---:|---:|---:|---:|---|"]
    for name in paths:
        runs = [r for n, r in rows if n == name]
        lines.append(f"| {name} | {runs[0]['rollouts']} | {runs[0]['calls']} | "
                     f"{runs[0]['raw_kb_per_rollout']:.0f} kB | "
                     f"{statistics.median(r['kb_per_rollout'] for r in runs):.0f} kB | "
                     f"{statistics.median(r['ratio'] for r in runs):.2f}x | "
                     + " ".join(f"{r['ratio']:.2f}" for r in runs) + " |")
    print("\n".join(lines))
    if args.out:
        head = ["## Live rollouts in memory: extending traffic", "",
                f"`bench/proxy_app.py --live {args.live}{' --against ' + args.against if args.against else ''} "
                f"--rounds {args.rounds}` ({os.cpu_count()} cores). The app driven in one process (as above: the "
                f"21 kB agent body, extending, {args.streams} rollouts at a time, each tool output its own "
                "words); the rollouts stay open (not finished). Measured over the last third of them (the first "
                "two thirds fill the template's bounded caches, which all rollouts share; they are emptied before "
                "each reading): held, what Python allocated and still holds (tracemalloc) per rollout; ratio: "
                "that over the bytes of the requests and answers they sent (as the "
                "stored-bytes goal counts them). Medians of the rounds.", ""]
        bench.write_section(Path(args.out), LIVE_BEGIN, LIVE_END, head + lines)


WIDE_BEGIN, WIDE_END = "<!-- wide:begin -->", "<!-- wide:end -->"


def wide_main(args) -> None:
    """CPU per call of many open rollouts taking turns: this checkout and ``--against REV``'s at once, per round."""
    with contextlib.ExitStack() as trees:
        paths, rows = checkouts(trees, args.against), []
        for round_ in range(args.rounds):
            procs = {name: start(checkout, "extend", 0, args.streams, wide=args.wide)
                     for name, checkout in paths.items()}
            rows += [(name, result(proc, paths[name], 300)) for name, proc in procs.items()]
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    ref = list(paths)[-1]
    lines = ["| app | open rollouts | calls each | history at the end | calls/s | CPU ms/call, second half | "
             f"per round | vs {ref} |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for name in paths:
        runs, refs = [r for n, r in rows if n == name], [r for n, r in rows if n == ref]
        ratio = statistics.median(r["cpu_ms"] / b["cpu_ms"] for r, b in zip(runs, refs, strict=True))
        lines.append(f"| {name} | {runs[0]['rollouts']} | {runs[0]['calls']} | {runs[0]['history_kb']:.0f} kB | "
                     f"{statistics.median(r['calls_s'] for r in runs):.0f} | "
                     f"{statistics.median(r['cpu_ms'] for r in runs):.3f} | "
                     + " ".join(f"{r['cpu_ms']:.3f}" for r in runs) + f" | {ratio:.2f}x |")
    print("\n".join(lines))
    if args.out:
        head = ["## Many open rollouts taking turns: extending traffic", "",
                f"`bench/proxy_app.py --wide {args.wide}{' --against ' + args.against if args.against else ''} "
                f"--rounds {args.rounds}` ({os.cpu_count()} cores; both apps at once, one per core). The app driven "
                "in one process (the 21 kB agent body; each tool output its own words): that many rollouts open "
                f"at once, taking turns ({args.streams} calls at a time), one extending call each a turn, as a "
                "training step's rollouts do; CPU per call over the second half of the turns, when every call "
                "brings a long history (its prompt is that whole history: at commits before ec7a4d3 each call "
                "rendered it, from the template's text cache, bounded and shared by all rollouts, or again; since, "
                "only what follows the rollout's kept prompt).", ""]
        from proxy import write_section  # on the path since ``checkouts``

        write_section(Path(args.out), WIDE_BEGIN, WIDE_END, head + lines)


WORKER_BEGIN, WORKER_END = "<!-- worker-heap:begin -->", "<!-- worker-heap:end -->"


def worker_heap_main(args) -> None:
    """This checkout's app in the heap of veRL's agent-loop worker (its module imported: torch, veRL, Ray), the
    garbage collector as Python sets it (what the worker had) and settled (``settle_heap``: what
    ``ForgeAgentLoop`` does at a worker's first rollout), both at once each round, extending traffic."""
    got: dict[str, list[dict]] = {"default": [], "settled": []}
    for round_ in range(args.rounds):
        procs = {mode: start(ROOT, "extend", args.seconds, args.streams, "verl", mode) for mode in got}
        for mode, proc in procs.items():
            got[mode].append(result(proc, ROOT, args.seconds))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in got[mode])
    lines = ["| GC | heap objects | calls/s | CPU ms/call | CPU per round | GC ms/call | full collections | "
             "longest ms | call p50 ms | call p99 ms | call max ms |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for mode, name in (("default", "Python's defaults"), ("settled", "settled")):
        lines.append(f"| {name} | {med(mode, 'heap_objects'):,.0f} | {med(mode, 'calls_s'):.0f} | "
                     f"{med(mode, 'cpu_ms'):.3f} | " + " ".join(f"{r['cpu_ms']:.3f}" for r in got[mode]) +
                     f" | {med(mode, 'gc_ms_call'):.3f} | {sum(r['full_gcs'] for r in got[mode])} | "
                     f"{max(r['full_gc_ms'] for r in got[mode]):.0f} | {med(mode, 'p50_ms'):.2f} | "
                     f"{med(mode, 'p99_ms'):.2f} | {max(r['max_ms'] for r in got[mode]):.1f} |")
    ratio = statistics.median(s["cpu_ms"] / d["cpu_ms"] for s, d in zip(got["settled"], got["default"], strict=True))
    lines += ["", f"CPU per call, settled over defaults, median of the rounds' ratios: {ratio:.3f}x"]
    print("\n".join(lines))
    if args.out:
        sys.path.insert(0, str(ROOT / "bench"))
        import proxy as bench

        head = ["## The proxy in an agent-loop worker's heap", "",
                f"`bench/proxy_app.py --worker-heap --rounds {args.rounds} --seconds {args.seconds:g}` "
                f"({os.cpu_count()} cores). The app as `bench/proxy_app.py` drives it ({args.streams} agent loops of "
                "extending calls on the 21 kB body, straight into the ASGI app, the engine answering at once), in a "
                "process that first imports veRL's agent-loop module (torch, veRL, Ray: the heap of the worker "
                "where `ForgeAgentLoop` runs a proxy app per rollout). Python's defaults: the collector as the worker "
                "had it; settled: `settle_heap` (what `ForgeAgentLoop` now does at the worker's first rollout). Both "
                "at once, one per core, each round; medians (collections: the sum, and the longest, over the "
                "rounds). Calls' times are the proxy's own work and its queueing behind the other loops.", ""]
        bench.write_section(Path(args.out), WORKER_BEGIN, WORKER_END, head + lines)


if __name__ == "__main__":
    main()
