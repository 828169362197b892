"""The imported-benchmark verifier (runner/forge_clawbench.py) on the host: root/ plays the container's /.

Each test imports one of our format-faithful task files (tests/data/clawbench), lays out the agent's
workspace and a transcript under root/, runs the task's tests/forge_clawbench.py as test.sh would
(``python3 -I -S``) and reads the reward back as the orchestrator does. The judge is the scripted
OpenAI-compatible stub on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openforgerl.envs.clawbench import JudgeSettings, import_clawbench
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.rollout.runtime import ExecResult
from openforgerl.rollout.transcript import to_jsonl, transcript_events
from openforgerl.testing.openai_stub import ScriptedChatServer
from openforgerl.testing.runtime import FakeRuntime, Scenario, writes
from openforgerl.verifiers.reward import Verdict, parse_reward_files

DATA = Path(__file__).resolve().parents[2] / "data" / "clawbench"
PASS, FAIL = "Accurate and complete.\nVERDICT: PASS", "The follow-up is missing.\nVERDICT: FAIL"
GOOD_SUMMARY = ("# Orders outage\nStarted 10:04, ended 10:11. Root cause: the disk filled up (No space left on "
                "device).\nFollow-up: alert at 85% disk usage.\n")


def call(tool: str, args: dict, text: str = "", results: tuple[str, ...] = ()) -> dict:
    """One recorded model call, as the proxy's trajectory summary lists it."""
    return {"status": "ok", "tokens_in": 10, "tokens_out": 5,
            "digest": {"text": text, "results": [{"tool": tool, "text": r} for r in results],
                       "calls": [{"name": tool, "args": json.dumps(args)}] if tool else []}}


class Box:
    """An imported task's tests/ and a container filesystem under ``root``."""

    def __init__(self, tmp_path: Path, task: str, judge_url: str | None = None, benchmark: str | None = None) -> None:
        judge = JudgeSettings(base_url=judge_url, model="judge-7b", votes=3) if judge_url else None
        [record] = import_clawbench(DATA / "tasks" / f"{task}.md", tmp_path / "out", assets=DATA / "assets",
                                    judge=judge, benchmark=benchmark)  # type: ignore[arg-type]
        assert record.error is None, record.error
        self.task, self.root = record.target, tmp_path / "root"
        files = self.task / "environment" / "files"
        shutil.copytree(files, self.root / "app") if files.is_dir() else (self.root / "app").mkdir(parents=True)
        self.instruction = (self.task / "instruction.md").read_text()

    def write(self, container_path: str, text: str) -> None:
        target = self.root / container_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def settings(self, **changes) -> None:
        path = self.task / "tests" / "clawbench.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    def grade_source(self, source: str) -> None:
        (self.task / "tests" / "grade.py").write_text(source)

    def verify(self, calls: list[dict] | None = None, *, transcript: bool = True) -> Verdict:
        if transcript:
            self.write("/logs/verifier/transcript.jsonl", to_jsonl(transcript_events(self.instruction, calls or [])))
        run = subprocess.run([sys.executable, "-I", "-S", str(self.task / "tests" / "forge_clawbench.py"),
                              "--root", str(self.root)], capture_output=True, text=True, timeout=120)
        verdict = parse_reward_files(self.root / "logs" / "verifier")
        assert verdict.error is None, (verdict.error, run.stderr)
        return verdict


def test_a_passing_grade_scores_1_with_each_criterion_in_checks(tmp_path: Path):
    box = Box(tmp_path, "task_01_greeting_file")
    box.write("/app/greeting.txt", "hello clawbench\n")
    verdict = box.verify([call("write_file", {"path": "greeting.txt", "content": "hello clawbench"}),
                          call("", {}, text="Done.")])
    assert verdict.reward == 1.0 and verdict.metrics["automated"] == 1.0 and verdict.metrics["judge"] is None
    assert verdict.metrics["checks"] == {"file_exists": 1.0, "content_exact": 1.0, "written_by_tool": 1.0}
    assert verdict.metrics["scoring"] == "automated: mean of grade()'s scores"


def test_a_partial_pass_scores_the_mean_of_the_criteria(tmp_path: Path):
    box = Box(tmp_path, "task_02_csv_totals")
    box.write("/app/totals.json", json.dumps({"north": 170, "south": 40, "west": 0}))
    verdict = box.verify([call("read_file", {"path": "data/sales.csv"})])
    assert verdict.metrics["checks"] == {"valid_json": 1.0, "right_regions": 1.0, "right_totals": 2 / 3,
                                         "inputs_intact": 1.0}
    assert verdict.reward == pytest.approx((3 + 2 / 3) / 4)


def test_the_grader_sees_the_agent_s_workspace_at_the_path_it_was_given_and_the_transcript(tmp_path: Path):
    box = Box(tmp_path, "task_01_greeting_file")
    box.grade_source("def grade(transcript, workspace_path):\n    import os\n"
                     "    roles = [e['message']['role'] for e in transcript if e.get('type') == 'message']\n"
                     "    return {'workspace': float(os.path.isfile(os.path.join(workspace_path, 'notes/a.txt'))),\n"
                     "            'roles': float(roles == ['user', 'assistant', 'toolResult', 'assistant'])}\n")
    box.write("/app/notes/a.txt", "x")
    verdict = box.verify([call("exec", {"command": "ls"}), call("", {}, text="ok", results=("a.txt",))])
    assert verdict.metrics["checks"] == {"workspace": 1.0, "roles": 1.0}


@pytest.mark.parametrize("source, error", [
    ("def grade(transcript, workspace_path):\n    return {'a': 1.0, 'b': 1 / 0}\n", "ZeroDivisionError"),
    ("def grade(transcript, workspace_path):\n    raise SystemExit(3)\n", "SystemExit"),
    ("def grade(transcript, workspace_path):\n    return [1.0]\n", "returned list, not a dict"),
    ("def score(transcript, workspace_path):\n    return {'a': 1.0}\n", "defines no grade() function"),
    ("import nonexistent_module_xyz\ndef grade(t, w):\n    return {'a': 1.0}\n", "ModuleNotFoundError"),
])
def test_a_grader_that_fails_scores_0_with_its_error_and_the_reward_file_is_still_written(tmp_path: Path,
                                                                                          source: str, error: str):
    box = Box(tmp_path, "task_01_greeting_file")
    box.grade_source(source)
    verdict = box.verify()
    assert verdict.reward == 0.0 and verdict.metrics["checks"] == {} and error in verdict.metrics["grade_error"]


def test_a_grader_that_runs_too_long_is_stopped_even_when_it_catches_exceptions(tmp_path: Path):
    box = Box(tmp_path, "task_01_greeting_file")
    box.grade_source("def grade(transcript, workspace_path):\n    while True:\n        try:\n"
                     "            sum(range(1000))\n        except Exception:\n            pass\n")
    box.settings(grade_timeout_sec=0.5)
    verdict = box.verify()
    assert verdict.reward == 0.0 and "ran past 0.5 s" in verdict.metrics["grade_error"]


def test_no_transcript_file_means_an_empty_transcript_noted(tmp_path: Path):
    box = Box(tmp_path, "task_01_greeting_file")
    box.write("/app/greeting.txt", "hello clawbench")
    verdict = box.verify(transcript=False)
    assert verdict.reward == pytest.approx(2 / 3)
    assert "transcript.jsonl is missing" in verdict.metrics["transcript_note"]


def test_hybrid_weights_the_judge_s_pass_fraction_and_shows_it_the_work(tmp_path: Path):
    with ScriptedChatServer([PASS, FAIL, PASS]) as judge:
        box = Box(tmp_path, "task_03_incident_summary", judge.base_url)
        box.write("/app/summary.md", GOOD_SUMMARY)
        verdict = box.verify([call("write_file", {"path": "summary.md", "content": GOOD_SUMMARY},
                                   text="I read the log and wrote the summary.")])
    assert verdict.metrics["automated"] == 1.0 and verdict.metrics["judge"] == pytest.approx(2 / 3)
    assert verdict.reward == pytest.approx(0.6 * 1.0 + 0.4 * 2 / 3)
    assert verdict.metrics["checks"]["llm_judge"] == pytest.approx(2 / 3)
    assert verdict.metrics["judge_details"]["votes"] == ["PASS", "FAIL", "PASS"]
    prompt = judge.requests[0]["messages"][-1]["content"]
    assert len(judge.requests) == 3 and all(r["model"] == "judge-7b" for r in judge.requests)
    assert "Criterion 2: Follow-up" in prompt and "## File: summary.md" in prompt and "alert at 85%" in prompt
    assert "Assistant: I read the log and wrote the summary." in prompt and "Tool call: write_file(" in prompt
    assert "## File: logs/app.log" in prompt  # unchanged, but the rubric names it


def test_qwenclawbench_counts_the_judge_as_0_below_an_automated_score_of_075_without_asking_it(tmp_path: Path):
    half = "# Outage\nStarted 10:04. The disk was full.\n"  # one time of two: 2.5/3 with the title, 1.5/3 without
    with ScriptedChatServer([PASS]) as judge:
        box = Box(tmp_path, "task_03_incident_summary", judge.base_url, benchmark="qwenclawbench")
        box.write("/app/summary.md", half.replace("# Outage\n", ""))
        verdict = box.verify([call("write_file", {"path": "summary.md"}, text="done")])
        assert judge.requests == []
    assert verdict.metrics["automated"] == pytest.approx(0.5) and verdict.metrics["judge"] == 0.0
    assert "< 0.75" in verdict.metrics["judge_details"]["skipped"]
    assert verdict.reward == pytest.approx(0.6 * 0.5)
    with ScriptedChatServer([PASS]) as judge:
        box = Box(tmp_path / "again", "task_03_incident_summary", judge.base_url, benchmark="qwenclawbench")
        box.write("/app/summary.md", half)
        verdict = box.verify([call("write_file", {"path": "summary.md"}, text="done")])
        assert len(judge.requests) == 3
    assert verdict.metrics["automated"] == pytest.approx(2.5 / 3) and verdict.reward == pytest.approx(
        0.6 * 2.5 / 3 + 0.4)


def test_pinchbench_asks_the_judge_whatever_the_automated_score(tmp_path: Path):
    with ScriptedChatServer([PASS]) as judge:
        box = Box(tmp_path, "task_03_incident_summary", judge.base_url)
        verdict = box.verify([call("", {}, text="I could not find the log.")])
    assert verdict.metrics["automated"] == 0.0 and verdict.reward == pytest.approx(0.4)


def test_an_llm_judge_task_scores_the_pass_fraction_and_nothing_to_judge_scores_0_unasked(tmp_path: Path):
    with ScriptedChatServer([PASS, PASS, FAIL]) as judge:
        box = Box(tmp_path, "task_04_haiku", judge.base_url)
        box.write("/app/haiku.md", "Layers stack like bricks\nimages sail from port to port\nruns the same on all\n")
        verdict = box.verify([call("write_file", {"path": "haiku.md"}, text="Saved the haiku.")])
        assert verdict.reward == pytest.approx(2 / 3) and verdict.metrics["automated"] is None
        asked = len(judge.requests)
        nothing = Box(tmp_path / "nop", "task_04_haiku", judge.base_url).verify([])
        assert len(judge.requests) == asked  # a rollout that never answered is not worth a judge call
    assert nothing.reward == 0.0 and "no assistant message" in nothing.metrics["judge_details"]["skipped"]


def test_an_unreachable_judge_scores_its_part_0_and_says_why(tmp_path: Path):
    with ScriptedChatServer([PASS]) as judge:
        url = judge.base_url
    box = Box(tmp_path, "task_03_incident_summary", url)
    box.settings(judge={"base_url": url, "model": "judge-7b", "votes": 1, "timeout_sec": 2})
    box.write("/app/summary.md", GOOD_SUMMARY)
    verdict = box.verify([call("", {}, text="done")])
    assert verdict.reward == pytest.approx(0.6) and verdict.metrics["judge"] == 0.0
    assert "no valid verdict" in verdict.metrics["judge_details"]["error"]


def test_hybrid_without_a_judge_scores_the_automated_part(tmp_path: Path):
    box = Box(tmp_path, "task_03_incident_summary")
    box.write("/app/summary.md", GOOD_SUMMARY)
    verdict = box.verify([call("", {}, text="done")])
    assert verdict.reward == 1.0 and verdict.metrics["judge"] is None
    assert verdict.metrics["scoring"] == "hybrid without a judge: the automated part only"


def test_the_agent_cannot_raise_its_reward_by_planting_the_transcript_or_the_reward(tmp_path: Path):
    """End to end through the orchestrator (FakeRuntime, the real runner): the agent writes the file but
    makes no model call, and plants a transcript claiming the tool call plus a reward of 1."""
    box = Box(tmp_path, "task_01_greeting_file")
    forged = to_jsonl(transcript_events(box.instruction, [call("write_file", {"path": "greeting.txt"})]))
    agent = writes("/app/greeting.txt", "hello clawbench",
                   then=writes("/logs/verifier/transcript.jsonl", forged,
                               then=writes("/logs/verifier/reward.json", '{"reward": 1.0}')))
    seen = []

    async def runner(sandbox, command, timeout):
        seen.append(sandbox.read("/logs/verifier/transcript.jsonl"))
        run = subprocess.run([sys.executable, "-I", "-S", str(sandbox.path("/tests/forge_clawbench.py")),
                              "--root", str(sandbox.root)], capture_output=True, text=True, timeout=120)
        return ExecResult(run.returncode, run.stdout, run.stderr, 0.0)

    config = RolloutConfig(tasks=[str(box.task)], harness="nop", run_dir=str(tmp_path / "run"))
    _, [result] = asyncio.run(run_rollouts(config, runtime=FakeRuntime(Scenario(agent=agent, verifier=runner))))
    assert "toolCall" not in seen[0]  # what the proxy recorded (no calls), not what the agent planted
    assert result.reward == pytest.approx(2 / 3) and result.metrics["checks"]["written_by_tool"] == 0.0
