"""The proxy's render of message runs whose texts are new: through their shapes (``slots``) against Jinja.

Every call of an agent brings new runs (the model's answer calling a tool, the tool's output); the proxy renders
each one to text before tokenising what is new. This times that render for realistic runs, one new run at a time
(no cache can serve them), with shapes on and off in the same process, interleaved in rounds; and a whole
60-message history rendered with the text cache empty (what a call paid when many live rollouts had turned the
cache over). Ratios are of medians over the rounds.

``--thinking``: instead, a reasoning model's agent loop (each answer's reasoning in ``<think>`` tags, under
``openforgerl.testing.proxy.THINKING_TEMPLATE``, which shows it only after the last user message, as Qwen3's
does): what rendering one extending call's prompt costs run by run from the caches (what the proxy did before it
checked for such templates: a wrong text, without the reasoning), in full, and after the kept prompt (what it
does now), for histories of growing length.

Run: .venv/bin/python bench/proxy_render.py [--rounds 7] [--thinking] [--out bench/results/proxy.md]
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
THINKING_BEGIN, THINKING_END = "<!-- render-thinking:begin -->", "<!-- render-thinking:end -->"


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
    parser.add_argument("--thinking", action="store_true", help="a reasoning model's agent loop instead")
    parser.add_argument("--out", help="write the section 'Rendering new runs' of this markdown file")
    args = parser.parse_args()
    if args.thinking:
        thinking(args)
        return
    from openforgerl.rollout.proxy import template as template_module
    from openforgerl.rollout.proxy.template import HFChatTemplate, load_chat_template

    template = load_chat_template("smollm2")
    assert isinstance(template, HFChatTemplate)
    template.prepare()
    assert template._slots, "the policy template does not render through shapes"
    history = [{"role": "system", "content": "You are a coding agent. " * 200}, {"role": "user", "content": "Fix it."}]
    for i in range(29):
        history += [*answer(i), *output(i)]
    fresh = iter(range(10**9))
    for _ in range(template_module.VERIFY_FIRST):  # a template's first renders are also rendered in full (checked)
        template.render(history, None, True)

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


def thinking(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import orjson
    from proxy import agent_history, write_section

    from openforgerl.rollout.proxy.template import VERIFY_FIRST
    from openforgerl.testing.proxy import thinking_template

    template = thinking_template()
    template.prepare()
    assert template._thinking_in_full and template._thinking_after_query
    why = "<think>\nThe test fails on the parser; look at the file, then run the tests again.\n</think>\n\n"
    rows = []
    for turns in (6, 12, 24, 48):
        history = agent_history(turns)
        for message in history:
            if message["role"] == "assistant":
                message["content"] = why
        start = len(history) - 2  # the call adds the last answer and its tool's output
        kept = template.full_render(history[:start], None, True)
        full = template.full_render(history, None, True)
        assert template.render_after(kept, history, start, None) == full
        assert template._by_message(history, None, True) != full  # run by run: the reasoning is gone
        for _ in range(VERIFY_FIRST):  # a template's first renders are also rendered in full (checked)
            template.render_after(kept, history, start, None)
        ways = {"run by run": lambda: template._by_message(history, None, True),  # noqa: B023
                "full": lambda: template.full_render(history, None, True),  # noqa: B023
                "after the kept prompt": lambda: template.render_after(kept, history, start, None)}  # noqa: B023
        got: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, render in ways.items():
                started = time.perf_counter()
                for _ in range(50):
                    render()
                got.setdefault(name, []).append((time.perf_counter() - started) / 50 * 1e3)
        ms = {name: statistics.median(times) for name, times in got.items()}
        rows.append(f"| {len(history)} | {len(orjson.dumps(history)) / 1000:.0f} kB | {ms['run by run']:.3f} | "
                    f"{ms['full']:.3f} | {ms['after the kept prompt']:.3f} | "
                    f"{ms['after the kept prompt'] / ms['full']:.2f}x |")
    lines = ["| messages | history | run by run ms (wrong: no reasoning) | full ms | after the kept prompt ms | "
             "after / full |", "|---:|---:|---:|---:|---:|---:|", *rows]
    lines += qwen3_runs(args)
    print("\n".join(lines))
    if args.out:
        head = ["## Rendering a reasoning model's agent loop", "",
                f"`bench/proxy_render.py --thinking --rounds {args.rounds}` ({os.cpu_count()} cores, one process). "
                "The agent body's history (its 3.1k-word system prompt, a task, tool calls and outputs) with each "
                "answer's reasoning in its content, under `THINKING_TEMPLATE` (`openforgerl.testing.proxy`: shows "
                "an answer's reasoning only after the last user message, as Qwen3's template does). Time to render "
                "the prompt of a call that adds an answer and its tool's output: run by run from warm caches (what "
                "the proxy did before it checked templates for this: the text lacks the reasoning), the template's "
                "full render, and the kept prompt plus what the call adds rendered after a user message (what it "
                "does now). Medians of the rounds, 50 renders a point.", ""]
        write_section(Path(args.out), THINKING_BEGIN, THINKING_END, head + lines)


def qwen3_runs(args: argparse.Namespace) -> list[str]:
    """New runs under a real Qwen3-derived template (MiniCPM-V 4.5's, which vLLM ships), shapes on and off: its
    answers are tested for ``'</think>' in content`` (a guard)."""
    import copy
    import importlib.util

    from openforgerl.rollout.proxy.template import HFChatTemplate
    from openforgerl.testing.proxy import policy_template

    spec = importlib.util.find_spec("vllm")
    path = Path(spec.origin).parent / "transformers_utils/chat_templates/template_minicpmv45.jinja" \
        if spec and spec.origin else None
    if path is None or not path.exists():
        return ["", "(vLLM's MiniCPM-V 4.5 template is not installed here: no runs measured under it.)"]
    tokenizer = copy.deepcopy(policy_template().tokenizer)  # type: ignore[attr-defined]
    tokenizer.chat_template = path.read_text()
    template = HFChatTemplate(tokenizer)
    template.prepare()
    fresh = iter(range(10**9))

    def texted(i: int) -> list[dict]:
        return [{**answer(i)[0], "content": f"Let me look at handler{i} first."}]

    def bare(i: int) -> list[dict]:
        return [{**answer(i)[0], "content": ""}]  # (the proxy's messages: content "" beside tool calls)
    runs = {"an answer with text calling a tool (new)": texted, "an answer calling a tool, no text (new)": bare,
            "a tool output of 20 lines (new)": output}
    got: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.rounds):
        for name, make in runs.items():
            for shapes in (True, False):
                template._slots = shapes
                started = time.perf_counter()
                for _ in range(500):
                    template._new_run_text(make(next(fresh)))
                got.setdefault((name, shapes), []).append((time.perf_counter() - started) / 500 * 1e6)
    lines = ["", "New runs under vLLM's MiniCPM-V 4.5 template (Qwen3's rules; it tests each answer for `</think>`: a "
             "guard on the shape), 500 runs a point:", "",
             "| run | Jinja us | shape us | ratio |", "|---|---:|---:|---:|"]
    for name in runs:
        jinja, shaped = statistics.median(got[(name, False)]), statistics.median(got[(name, True)])
        lines.append(f"| {name} | {jinja:.1f} | {shaped:.1f} | {shaped / jinja:.2f}x |")
    return lines


if __name__ == "__main__":
    main()
