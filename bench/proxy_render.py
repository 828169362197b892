"""The proxy's render of message runs whose texts are new: through their shapes (``slots``) against Jinja.

Every call of an agent brings new runs (the model's answer calling a tool, the tool's output); the proxy renders
each one to text before tokenising what is new. This times that render for realistic runs, one new run at a time
(no cache can serve them), with shapes on and off in the same process, interleaved in rounds; and a whole
60-message history rendered with the text cache empty (what a call paid when many live rollouts had turned the
cache over). Ratios are of medians over the rounds.

Run: .venv/bin/python bench/proxy_render.py [--rounds 7] [--out bench/results/proxy.md]
Only this process is involved: no network at all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BEGIN, END = "<!-- render-shapes:begin -->", "<!-- render-shapes:end -->"


def answer(i: int) -> list[dict]:
    """An answer calling a tool, arguments as an object (as the proxy's dialects make every tool call)."""
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
        "name": "shell", "arguments": {"cmd": f"grep -rn 'def handler{i}' src/ | head -{i % 50}",
                                       "cwd": "/work/repo"}}}]}]


def codex_answer(i: int) -> list[dict]:
    """An answer calling Codex's shell tool: the command as a list, a timeout as a number."""
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
        "name": "shell", "arguments": {"command": ["bash", "-lc", f"sed -n '{i},{i + 40}p' src/app.py"],
                                       "workdir": "/work/repo", "timeout_ms": 10_000 + i}}}]}]


def output(i: int) -> list[dict]:
    lines = f"src/app.py:{i}: def handler{i}(request):\n" * 20
    return [{"role": "tool", "tool_call_id": f"call_{i}", "content": lines}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=1500, help="new runs rendered per point")
    parser.add_argument("--out", help="write the section 'Rendering new runs' of this markdown file")
    args = parser.parse_args()
    from openforgerl.rollout.proxy.template import HFChatTemplate, load_chat_template

    template = load_chat_template("smollm2")
    assert isinstance(template, HFChatTemplate)
    template.prepare()
    assert template._slots, "the policy template does not render through shapes"
    history = [{"role": "system", "content": "You are a coding agent. " * 200}, {"role": "user", "content": "Fix it."}]
    for i in range(29):
        history += [*answer(i), *output(i)]
    fresh = iter(range(10**9))

    def per_run(make) -> float:
        started = time.perf_counter()
        for _ in range(args.runs):
            template._new_run_text(make(next(fresh)))  # a new run each time: nothing cached
        return (time.perf_counter() - started) / args.runs * 1e6

    def cold_history() -> float:
        times = []
        for _ in range(20):
            template._texts.clear()
            started = time.perf_counter()
            template.render(history, None, True)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e6
    points = {"an answer calling a tool (new)": lambda: per_run(answer),
              "an answer calling Codex's shell (a list, a number; new)": lambda: per_run(codex_answer),
              "a tool output of 20 lines (new)": lambda: per_run(output),
              f"a {len(history)}-message history, text cache empty": cold_history}
    got: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.rounds):
        for name, measure in points.items():
            for shapes in (True, False):
                template._slots = shapes
                got.setdefault((name, shapes), []).append(measure())
    lines = ["| run | Jinja us | shape us | ratio |", "|---|---:|---:|---:|"]
    for name in points:
        jinja, shaped = statistics.median(got[(name, False)]), statistics.median(got[(name, True)])
        ratio = statistics.median(s / j for s, j in zip(got[(name, True)], got[(name, False)], strict=True))
        lines.append(f"| {name} | {jinja:.1f} | {shaped:.1f} | {ratio:.2f}x |")
    print("\n".join(lines))
    if args.out:
        sys.path.insert(0, str(ROOT / "bench"))
        from proxy import write_section

        head = ["## Rendering new runs: shapes against Jinja", "",
                f"`bench/proxy_render.py --rounds {args.rounds}` ({os.cpu_count()} cores, one process, the smollm2 "
                "template). Time to render one run of messages whose texts are new (each point renders "
                f"{args.runs} runs no cache holds), with shapes on and off, interleaved; medians of the rounds.", ""]
        write_section(Path(args.out), BEGIN, END, head + lines)


if __name__ == "__main__":
    main()
