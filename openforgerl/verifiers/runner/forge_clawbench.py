#!/usr/bin/env python3
"""forge_clawbench: grade an imported PinchBench / QwenClawBench task as its benchmark does; write the reward.

Copied into the task's ``tests/`` by ``forge tasks import-clawbench`` with ``grade.py`` (the task's
Automated Checks), ``judge.md`` (the judge's rubric) and ``clawbench.json`` (grading type, weights,
judge gate, judge endpoint, the workspace files the task provided); ``tests/test.sh`` starts it as
``python3 -I -S``. Stdlib only. Usage::

    forge_clawbench.py [--config FILE] [--root DIR] [--out DIR]

It reads ``/logs/verifier/transcript.jsonl`` (OpenClaw session events the orchestrator made from the
proxy's record), calls ``grade(transcript, "/app")``: automated = the mean of the scores it returns;
asks the LLM judge (``forge_judge``: pinned model, k votes, the fraction that PASS) about the
transcript and the workspace files; combines them with the benchmark's weights and gate.

Invariant: it always ends by writing ``OUT/reward.json`` ``{"reward", "checks": {criterion: score},
"automated", "judge", ...}``: a grade() that raises, exits or runs past its time scores 0 with the
error recorded, and reward files already in OUT are deleted before anything runs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import signal
import stat
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import forge_judge  # noqa: E402  (imported before grade() runs, so nothing it adds to sys.path is searched)
from forge_verify import Context, clear_rewards, write_reward  # noqa: E402

RUNNER_VERSION = 1
CONFIG_FILE, GRADE_FILE, RUBRIC_FILE = "clawbench.json", "grade.py", "judge.md"
TRANSCRIPT = "/logs/verifier/transcript.jsonl"
JUDGE_INPUT = "/logs/verifier/judge_input.md"
SYSTEM_PACKAGES = "/usr/lib/python3/dist-packages"
"""Debian's python packages (root's, out of the agent's reach): what a grader may import beyond the stdlib."""
OPENCLAW_FILES = {"AGENTS.md", "BOOTSTRAP.md", "HEARTBEAT.md", "IDENTITY.md", "SOUL.md", "TOOLS.md", "USER.md"}
"""Files OpenClaw puts in every workspace: shown to the judge only when the rubric names them."""
SKIP_DIRS = {"node_modules", "__pycache__"}
FILE_CHARS, INPUT_CHARS, MAX_FILE_BYTES, MAX_FILES = 8000, 40000, 1 << 20, 200


class GradeTimeout(BaseException):
    """grade() ran past its time (a BaseException, so a grader's ``except Exception`` cannot swallow it)."""


def run(config_file: Path, root: str, out: Path | None) -> dict:
    ctx = Context(root)
    out = out or ctx.path("/logs/verifier")
    clear_rewards(out)
    started = time.monotonic()
    try:
        result = grade_task(json.loads(config_file.read_text(encoding="utf-8")), ctx)
    except Exception as exc:  # an unreadable config still ends in a (zero) reward
        result = {"reward": 0.0, "checks": {}, "automated": None, "judge": None,
                  "error": f"{config_file.name}: {describe(exc)}"}
    result["seconds"] = round(time.monotonic() - started, 3)
    result["runner_version"] = RUNNER_VERSION
    write_reward(out, result)
    return result


def grade_task(config: dict, ctx: Context) -> dict:
    transcript, transcript_note = load_transcript(ctx.path(TRANSCRIPT))
    kind = config["grading_type"]
    result: dict = {"reward": 0.0, "checks": {}, "automated": None, "judge": None, "grading_type": kind,
                    "benchmark": config.get("benchmark")}
    if transcript_note:
        result["transcript_note"] = transcript_note
    if kind in ("automated", "hybrid"):
        automated, checks, error = automated_part(config, transcript, ctx)
        result.update(automated=automated, checks=checks)
        if error:
            result["grade_error"] = error
    if kind in ("llm_judge", "hybrid"):
        judge, details = judge_part(config, transcript, ctx, result["automated"])
        result.update(judge=judge, judge_details=details)
        if "votes" in details:
            result["checks"]["llm_judge"] = judge
    reward, result["scoring"] = combine(config, result["automated"], result["judge"])
    if not math.isfinite(reward):
        result["error"] = f"the score is not a number ({reward!r}): a grade() score was NaN or infinite"
        reward = 0.0
    result["reward"] = min(1.0, max(0.0, reward))
    return result


def load_transcript(path: Path) -> tuple[list, str | None]:
    """The session events, one per line (a line that is not JSON is kept as the benchmarks keep it)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], f"{TRANSCRIPT} is missing: grade() got an empty transcript"
    events = []
    for line in text.splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError as exc:
                events.append({"raw": line, "parse_error": str(exc)})
    return events, None


def automated_part(config: dict, transcript: list, ctx: Context) -> tuple[float, dict, str | None]:
    """(mean score, criterion -> score, error): what grade() returned, as the benchmark averages it."""
    try:
        scores = call_grade((HERE / GRADE_FILE).read_text(encoding="utf-8"), copy.deepcopy(transcript),
                            str(ctx.path(config.get("workspace", "/app"))), config.get("grade_timeout_sec", 60))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # raised, exited or ran too long: scores 0, the error is kept
        return 0.0, {}, describe(exc)
    if not isinstance(scores, dict):
        return 0.0, {}, f"grade() returned {type(scores).__name__}, not a dict of criterion -> score"
    checks = {str(key): float(value) for key, value in scores.items() if isinstance(value, (int, float))}
    mean = sum(checks.values()) / len(checks) if checks else 0.0
    return mean, checks, None


def call_grade(source: str, transcript: list, workspace: str, timeout: float):
    """Exec the grader's source and call ``grade(transcript, workspace)``; cwd and sys.path are restored."""
    namespace = {"__name__": "clawbench_grade", "__builtins__": __builtins__}
    cwd, path = os.getcwd(), list(sys.path)
    if os.path.isdir(SYSTEM_PACKAGES) and SYSTEM_PACKAGES not in sys.path:
        sys.path.append(SYSTEM_PACKAGES)

    def expired(signum, frame):
        raise GradeTimeout(f"grade() ran past {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exec(compile(source, str(HERE / GRADE_FILE), "exec"), namespace)
        grade = namespace.get("grade")
        if not callable(grade):
            raise NameError(f"{GRADE_FILE} defines no grade() function")
        return grade(transcript, workspace)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(cwd)
        sys.path[:] = path


def judge_part(config: dict, transcript: list, ctx: Context, automated: float | None) -> tuple[float | None, dict]:
    """(judge score or None when no judge is configured, details); the judge is asked only when it counts."""
    judge = config.get("judge")
    if not judge:
        return None, {"skipped": "no judge configured (forge tasks import-clawbench --judge-model ...)"}
    if not any(_message(event).get("role") == "assistant" for event in transcript):
        return 0.0, {"skipped": "the transcript has no assistant message: nothing to judge"}
    gate = config.get("judge_gate")
    if gate is not None and automated is not None and automated < gate:
        return 0.0, {"skipped": f"automated score {automated:.4g} < {gate:g}: {config.get('benchmark')} counts the "
                                "judge part as 0"}
    try:
        write_judge_input(config, transcript, ctx)
        spec = {"type": "llm_judge", "base_url": judge.get("base_url"), "model": judge["model"],
                "rubric": (HERE / RUBRIC_FILE).read_text(encoding="utf-8"), "inputs": [JUDGE_INPUT],
                "votes": judge.get("votes", 3), "threshold": 0.5, "scoring": "fraction",
                "temperature": judge.get("temperature", 0.7), "max_input_chars": INPUT_CHARS * 2,
                "api_key_env": judge.get("api_key_env"), "timeout_sec": judge.get("timeout_sec", 60)}
        score, details = forge_judge.check_llm_judge(spec, ctx)
    except Exception as exc:
        return 0.0, {"error": describe(exc)}
    return float(score), details


def combine(config: dict, automated: float | None, judge: float | None) -> tuple[float, str]:
    """The benchmark's final score, and the rule that made it."""
    kind = config["grading_type"]
    if kind == "automated":
        return automated or 0.0, "automated: mean of grade()'s scores"
    if kind == "llm_judge":
        return judge or 0.0, "llm_judge: fraction of judge votes that PASS"
    if judge is None:
        return automated or 0.0, "hybrid without a judge: the automated part only"
    weights = config.get("weights") or {}
    w_auto, w_judge = float(weights.get("automated", 0.5)), float(weights.get("llm_judge", 0.5))
    if w_auto + w_judge <= 0:
        w_auto = w_judge = 0.5
    gate = config.get("judge_gate")
    counted = 0.0 if gate is not None and (automated or 0.0) < gate else judge
    rule = f"hybrid: ({w_auto:g} * automated + {w_judge:g} * judge) / {w_auto + w_judge:g}"
    if gate is not None:
        rule += f", judge counted as 0 when automated < {gate:g}"
    return ((automated or 0.0) * w_auto + counted * w_judge) / (w_auto + w_judge), rule


def write_judge_input(config: dict, transcript: list, ctx: Context) -> Path:
    """What the judge reads: the transcript summarized, then the workspace files the rubric concerns."""
    rubric = (HERE / RUBRIC_FILE).read_text(encoding="utf-8")
    parts = ["# What the agent did (its transcript, summarized)", summarize(transcript) or "(no messages)", "",
             "# Files in the agent's workspace", *workspace_section(config, ctx, rubric)]
    target = ctx.path(JUDGE_INPUT)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return target


def summarize(transcript: list) -> str:
    lines = []
    for event in transcript:
        message = _message(event)
        role, content = message.get("role"), message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        for block in (b for b in blocks if isinstance(b, dict)):
            if block.get("type") == "text" and str(block.get("text", "")).strip():
                label = {"assistant": "Assistant", "user": "User"}.get(role, f"Tool result ({message.get('toolName')})")
                limit = 200 if role == "toolResult" else 2000
                lines.append(f"{label}: {_cut(str(block['text']).strip(), limit)}")
            elif block.get("type") == "toolCall" and role == "assistant":
                arguments = json.dumps(block.get("arguments", {}), ensure_ascii=False)
                lines.append(f"Tool call: {block.get('name')}({_cut(arguments, 400)})")
    return "\n".join(lines)


def workspace_section(config: dict, ctx: Context, rubric: str) -> list[str]:
    """Files the agent made or changed, those the rubric names first; then unchanged ones the rubric names."""
    root = ctx.path(config.get("workspace", "/app"))
    provided = config.get("provided_files") or {}
    files = workspace_files(root)
    named = {rel for rel in files if rel in rubric or os.path.basename(rel) in rubric}
    changed = [rel for rel in files if provided.get(rel) != _sha256(root / rel)]
    order = [r for r in changed if r in named] + [r for r in changed if r not in named and
                                                  os.path.basename(r) not in OPENCLAW_FILES]
    order += [r for r in files if r in named and r not in changed]
    section, budget = [], INPUT_CHARS
    for rel in order[:MAX_FILES]:
        text = _text(root / rel)
        if text is None:
            section.append(f"## File: {rel}\n(binary or over {MAX_FILE_BYTES} bytes: not shown)")
            continue
        shown = text[:min(FILE_CHARS, max(budget, 0))]
        budget -= len(shown)
        cut = " (cut)" if len(shown) < len(text) else ""
        section.append(f"## File: {rel}{cut}\n{shown}")
    return section or ["(no files the agent made or changed)"]


def workspace_files(root: Path) -> list[str]:
    """Regular files under the workspace (no links followed), hidden ones and dependency dirs left out."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(folder) / name
            if not name.startswith(".") and stat.S_ISREG(os.lstat(path).st_mode):
                found.append(path.relative_to(root).as_posix())
    return found


def _text(path: Path) -> str | None:
    if os.lstat(path).st_size > MAX_FILE_BYTES:
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _sha256(path: Path) -> str | None:
    try:
        if os.lstat(path).st_size > 64 * MAX_FILE_BYTES:
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _message(event) -> dict:
    message = event.get("message") if isinstance(event, dict) and event.get("type") == "message" else None
    return message if isinstance(message, dict) else {}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def describe(exc: BaseException) -> str:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    inside = [f"{Path(name).name}:{line}" for name, line in frames if Path(name).name == GRADE_FILE]
    where = f" (at {inside[-1]})" if inside else ""
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=HERE / CONFIG_FILE)
    parser.add_argument("--root", default="/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.config, args.root, args.out)
    print(json.dumps({"reward": result["reward"], "automated": result["automated"], "judge": result["judge"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
