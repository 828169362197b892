from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutResult
from openforgerl.rollout.run import summarize
from openforgerl.verifiers.reward import parse_reward_files


@pytest.mark.parametrize(("files", "reward", "error"), [
    ({"reward.json": '{"reward": 0.5, "tests_passed": 3}'}, 0.5, None),
    ({"reward.txt": "1\n"}, 1.0, None),
    ({"reward.json": '{"reward": 1}', "reward.txt": "0"}, 1.0, None),  # json wins
    ({"reward.json": "{not json"}, None, "not JSON"),
    ({"reward.json": '{"score": 1}'}, None, '"reward" number'),
    ({"reward.json": '{"reward": true}'}, None, "finite number"),
    ({"reward.json": '{"reward": NaN}'}, None, "finite number"),
    ({"reward.txt": "passed"}, None, "does not hold a number"),
    ({}, None, "neither reward.json nor reward.txt"),
])
def test_reward_files(tmp_path: Path, files: dict[str, str], reward, error):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    verdict = parse_reward_files(tmp_path)
    assert verdict.reward == reward
    assert (verdict.error is None) if error is None else (error in verdict.error)


def test_metrics_are_kept_without_the_reward_key(tmp_path: Path):
    (tmp_path / "reward.json").write_text('{"reward": 0.5, "tests_passed": 3}')
    assert parse_reward_files(tmp_path).metrics == {"tests_passed": 3}


def result(task: str, attempt: int, status: str, reward: float | None, try_index: int = 0) -> RolloutResult:
    return RolloutResult(f"r-{task}-{attempt}-{try_index}", task, attempt, "react", status, reward,
                         try_index=try_index)


def test_summary_counts_the_final_try_of_each_attempt_and_excludes_infra_rewards():
    results = [result("a", 0, "success", 1.0), result("a", 1, "infra_error", None),
               result("a", 1, "failure", 0.0, try_index=1), result("b", 0, "infra_error", None),
               result("b", 1, "verifier_error", None)]
    summary = summarize(results)
    assert summary["rollouts"] == 5 and summary["retries"] == 1
    assert summary["statuses"] == {"success": 1, "failure": 1, "agent_timeout": 0, "infra_error": 1,
                                   "verifier_error": 1, "cancelled": 0}
    assert summary["mean_reward"] == 0.5
    assert summary["tasks"]["a"] == {"attempts": 2, "successes": 1, "statuses": {"success": 1, "failure": 1}}


def test_rollout_reads_a_manifest_and_refuses_a_stale_pin(make_task, tmp_path: Path):
    import json

    from openforgerl.errors import UserError
    from openforgerl.rollout.run import load_tasks

    digest = "127.0.0.1:5000/openforgerl/task@sha256:" + "c" * 64
    task = make_task("pinned", f'[environment]\ndocker_image = "{digest}"\n')
    manifest = tmp_path / "manifest.jsonl"
    entry = {"task": "pinned", "path": str(task), "image": digest}
    manifest.write_text(json.dumps({**entry, "image": "old"}) + "\n" + json.dumps(entry) + "\n")
    assert [t.path for t in load_tasks([str(manifest)])] == [task]  # the last entry wins
    manifest.write_text(json.dumps({**entry, "image": "127.0.0.1:5000/other@sha256:" + "d" * 64}) + "\n")
    with pytest.raises(UserError, match="rerun forge build-env"):
        load_tasks([str(manifest)])
