"""Evaluation benchmark: what scoring, behaviour analysis and reporting cost, against baselines measured
in the same run (this machine is noisy: only the ratios are compared with the goals).

- The proxy digest (on every recorded call): ``call_digest`` of a Codex-sized request (a ~17k-char
  system prompt, 9 tools, a 60-message history) against rendering + tokenising that request's
  prompt, which the proxy does on every call anyway. Goal: the digest costs under 5 % of that.
- ``evaluate`` (pass@k, behaviour, cost) over a run of R rollouts x C calls, against only reading
  the same files (rollouts.jsonl + every trajectory). Goal: at most 2x the read.
- ``forge report`` of that run: seconds against the read, and the size of the HTML file.

Run: .venv/bin/python bench/evaluation.py   (needs the pulled model's tokenizer for the template)
Writes bench/results/evaluation.md.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openforgerl.evaluation.runner import evaluate  # noqa: E402
from openforgerl.evaluation.runs import load_run  # noqa: E402
from openforgerl.rollout.proxy.conversation import ChatRequest, Sampling, ToolCall  # noqa: E402
from openforgerl.rollout.proxy.digest import call_digest  # noqa: E402
from openforgerl.testing.proxy import policy_template  # noqa: E402

ROLLOUTS, CALLS = 400, 20
TOOLS = ["exec_command", "apply_patch", "write_stdin", "update_plan", "view_image", "read_file", "list_dir",
         "grep_files", "web_search"]


def codex_request(turns: int = 30) -> ChatRequest:
    tools = [{"type": "function", "function": {"name": n, "description": "d" * 300,
                                               "parameters": {"type": "object"}}} for n in TOOLS]
    messages = [{"role": "system", "content": "You are Codex. " * 1200}, {"role": "user", "content": "fix the bug"}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "exec_command", "arguments": json.dumps({"cmd": f"sed -n {i},+40p src/x.py"})}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "line of code\n" * 60}]
    return ChatRequest(messages=messages, tools=tools, sampling=Sampling())


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def digest_cost() -> dict[str, float]:
    template = policy_template()
    request = codex_request()
    calls = [ToolCall("c", "exec_command", json.dumps({"cmd": "pytest -q"}))]
    prompt = best_of(lambda: template.encode(template.render(request.messages, request.tools, True)))
    digest = best_of(lambda: [call_digest(request, calls, "Running the tests.") for _ in range(100)]) / 100
    return {"prompt_s": prompt, "digest_s": digest, "ratio": digest / prompt}


def synthetic_run(root: Path, rng: random.Random) -> None:
    (root / "trajectories").mkdir(parents=True)
    lines = []
    for r in range(ROLLOUTS):
        rid = f"r-{r:06d}"
        calls = []
        for c in range(CALLS):
            command = rng.choice(["cat /app/m{r}.py", "python -m pytest -q tests/test_{c}.py", "ls -la /app/{c}",
                                  "echo 'x = {c}' > /app/m{r}.py", "grep -rn 'def f{c}' /app | head",
                                  "sed -n '{c},+40p' /app/m{r}.py"]).format(r=r, c=c)  # few repeats, as in real runs
            calls.append({"index": c, "status": "ok", "kind": "clean", "segment": 0, "tokens_in": 4000 + c * 300,
                          "tokens_out": 80, "engine_ms": 900.0, "queue_ms": 20.0, "overhead_ms": 6.0,
                          "total_ms": 930.0,
                          "digest": {"offered": TOOLS, "calls": [{"name": "exec_command",
                                                                  "args": json.dumps({"cmd": command})}],
                                     "results": [{"tool": "exec_command",
                                                  "text": rng.choice(["exit code 0\nok", "exit code 1\nerror"])}]
                                     if c else [], "text": "thinking " * 20}})
        ids = list(range(3000))
        segment = {"prompt_ids": ids, "response_ids": ids[:1500], "response_mask": [1, 0] * 750,
                   "logprobs": [-0.5] * 1500, "calls": list(range(CALLS))}
        trajectory = {"id": rid, "status": "success", "reward": 1.0, "calls": calls, "segments": [segment]}
        (root / "trajectories" / f"{rid}.json").write_text(json.dumps(trajectory))
        status = rng.choice(["success", "failure"])
        lines.append({"rollout_id": rid, "task": f"t{r % 40}", "attempt": r // 40, "harness": "codex",
                      "status": status, "reward": 1.0 if status == "success" else 0.0, "try_index": 0,
                      "timings": {"container_start_s": 0.5, "harness_s": 20.0, "total_s": 22.0},
                      "model_usage": {"calls": CALLS, "engine_ms": 18000.0}, "metrics": {},
                      "harness_exit_code": 0, "trajectory": f"trajectories/{rid}.json", "sandbox": {}})
    (root / "rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (root / "config.yaml").write_text("model: smollm2\ntasks: []\n")


def read_only(root: Path) -> None:
    for line in (root / "rollouts.jsonl").read_text().splitlines():
        result = json.loads(line)
        json.loads((root / result["trajectory"]).read_text())


def run_costs() -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="forge-bench-eval-"))
    try:
        synthetic_run(root / "run", random.Random(0))
        read = best_of(lambda: read_only(root / "run"), 3)
        scored = best_of(lambda: evaluate(load_run(root / "run"), [1, 5, 10]), 3)
        out: dict[str, float] = {"read_s": read, "evaluate_s": scored, "evaluate_ratio": scored / read}
        try:
            from openforgerl.evaluation.report import write_report
        except ImportError:
            return out
        report = root / "report.html"
        out["report_s"] = best_of(lambda: write_report([root / "run"], out=report), 1)
        out["report_ratio"] = out["report_s"] / read
        out["report_mb"] = report.stat().st_size / 1e6
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    digest = digest_cost()
    costs = run_costs()
    rows = [("proxy digest per call (Codex-sized request)", f"{digest['digest_s'] * 1e3:.3f} ms",
             f"render+tokenise {digest['prompt_s'] * 1e3:.1f} ms", f"{digest['ratio']:.3%}", "< 5 %",
             "met" if digest["ratio"] < 0.05 else "NOT met"),
            (f"evaluate ({ROLLOUTS} rollouts x {CALLS} calls; k = 1, 5, 10)", f"{costs['evaluate_s']:.2f} s",
             f"read the files {costs['read_s']:.2f} s", f"{costs['evaluate_ratio']:.2f}x", "<= 2x",
             "met" if costs["evaluate_ratio"] <= 2 else "NOT met")]
    if "report_s" in costs:
        rows.append(("forge report of that run", f"{costs['report_s']:.2f} s, {costs['report_mb']:.1f} MB",
                     f"read the files {costs['read_s']:.2f} s", f"{costs['report_ratio']:.2f}x", "-", "-"))
    table = ["| what | measured | baseline (same run) | ratio | goal | |", "|---|---|---|---|---|---|"]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(["# Evaluation benchmark", "", f"`python bench/evaluation.py`, {time.strftime('%Y-%m-%d')}, "
                      "2-core machine; best of several repeats.", "", *table, ""])
    print(text)
    (Path(__file__).parent / "results" / "evaluation.md").write_text(text)


if __name__ == "__main__":
    main()
