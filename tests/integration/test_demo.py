"""The README's first command, ./scripts/demo, at the small size (FORGE_DEMO_SIZE=small): the whole
pipeline on the real parts (Docker, the local registry, vLLM with SmolLM2, the react and codex CLIs).

What a user sees: every stage finishes; forge synth --domain gui kept tasks from both proposers and
published them by digest; both evals ran react, codex and the reference solution on the same tasks
(the reference solves every one); training wrote its steps and checkpoints; the run ends with the
report's path and a before/after table. A failed stage is named with where to look, and a rerun
resumes: finished stages are not redone. The vLLM server the test session shares is left serving the
weights it started with (the demo loads trained weights into it for the second eval).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from openforgerl.serving.chat import chat_request, send_chat

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.harness]

ROOT = Path(__file__).parents[2]
HARNESSES = ("react", "codex", "oracle")
STAGES = 11  # chat, build-env, synth, build-env touch, rollout, sft, eval before, train, eval after, k8s, report


def demo(work: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORGE_DEMO_DIR": str(work), "FORGE_DEMO_SIZE": "small", "KEEP_SERVING": "1"}
    return subprocess.run([str(ROOT / "scripts" / "demo")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def logprobs(url: str) -> list[float]:
    return send_chat(url, chat_request("smollm2", "Name three colours.", max_tokens=8)).logprobs


@pytest.mark.timeout(3000)  # three demo runs: ~8 min, then two resumes of ~1 min each, on 2 busy cores
def test_the_demo_runs_the_whole_pipeline_and_a_rerun_resumes(tmp_path: Path, vllm_base_url: str):
    served_before = logprobs(vllm_base_url)
    work = tmp_path / "demo"
    done = demo(work)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    markers = {p.name for p in (work / ".done").iterdir()}
    assert "complete" in markers and len(markers) == STAGES + 1, sorted(markers)
    candidates = jsonl(work / "synth-gui" / "candidates.jsonl")
    assert {c["proposer"].split(":")[0] for c in candidates} == {"procedural", "llm"}, candidates  # llm:<model>
    published = jsonl(work / "synth-gui" / "manifest.jsonl")
    assert published and all("@sha256:" in p["image"] and p["validation"]["passed"] for p in published)

    tasks = {p["task"] for p in published} | {"touch-memo"}
    for run in ("eval-before", "eval-after"):
        rollouts = [r for harness in HARNESSES for r in jsonl(work / run / harness / "rollouts.jsonl")]
        ran = {(r["harness"], r["task"]) for r in rollouts}
        assert ran == {(h, t) for h in HARNESSES for t in tasks}, (run, ran)
        assert all(r["status"] == "success" for r in rollouts if r["harness"] == "oracle"), run
    metrics = jsonl(work / "train" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert (work / "train" / "checkpoints" / "step-1").is_dir()

    report = work / "eval-before" / "report.html"
    assert report.is_file() and str(report) in done.stdout
    table = [line.split() for line in done.stderr.splitlines()]
    header = ["harness", "/", "task", "eval-before", "eval-after", "change"]
    assert header in table, done.stderr[-3000:]
    rows = table[table.index(header) + 2:]
    assert [row[0] for row in rows if row[0] in ("codex", "oracle", "react")] == ["codex", "oracle", "react"]
    assert served_before == pytest.approx(logprobs(vllm_base_url), abs=1e-3)  # the pulled weights again

    # A stage that fails is named; the rerun resumes from it and redoes nothing that finished.
    moved = work / "eval-after.moved"
    (work / "eval-after").rename(moved)
    for marker in ("complete", "forge_report_eval-before_eval-after"):
        (work / ".done" / marker).unlink()
    failed = demo(work)
    assert failed.returncode == 1
    assert "demo stage 'forge report eval-before eval-after' failed" in failed.stderr, failed.stderr[-3000:]
    moved.rename(work / "eval-after")
    before_mtime = (work / "eval-before" / "react" / "rollouts.jsonl").stat().st_mtime
    resumed = demo(work)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-6000:]
    assert resumed.stdout.count("finished in an earlier run") == STAGES - 1
    assert (work / "eval-before" / "react" / "rollouts.jsonl").stat().st_mtime == before_mtime
    assert (work / ".done" / "complete").exists() and header in [line.split() for line in resumed.stderr.splitlines()]
