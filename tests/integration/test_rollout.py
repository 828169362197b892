"""forge rollout end to end: real Docker engine, real in-run proxy (scripted engine), real harness layer.

Fault injection: each failure gives its exact status, and counts reconcile (nothing lost).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from openforgerl.errors import ProviderError, UserError
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.orchestrator import STATUSES, RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.rollout.runtimes import docker as docker_runtime
from openforgerl.testing.harnesses import ShellHarness
from openforgerl.testing.tasks import BASE_DOCKERFILE, write_task

pytestmark = pytest.mark.docker

WRITE_HI = {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "hi"}}]}
WRITE_BYE = {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "bye"}}]}
FINISH = {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}

TEST_SH = """#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = hi ]; then r=1; else r=0; fi
echo "{\\"reward\\": $r, \\"checked\\": \\"hello.txt\\"}" > /logs/verifier/reward.json
"""


def make_task(root: Path, name: str, *, test_sh: str = TEST_SH, image: str | None = None,
              agent_timeout: float = 120, memory_mb: int | None = None) -> Path:
    return write_task(root, name, test_sh=test_sh, image=image, agent_timeout=agent_timeout,
                      environment={"memory_mb": memory_mb} if memory_mb else None)


def config(tmp_path: Path, tasks: list[Path], turns: list[dict] | None = None, **kw) -> RolloutConfig:
    engine = {"type": "scripted", "turns": turns or [WRITE_HI, FINISH]}
    return RolloutConfig(tasks=[str(t) for t in tasks], harness=kw.pop("harness", "react"), concurrency=1,
                         run_dir=str(tmp_path / "run"), proxy=ProxySettings(engine=engine), **kw)


def rollout(cfg: RolloutConfig, harness: Harness | None = None):
    run_dir, results = asyncio.run(run_rollouts(cfg, harness=harness))
    lines = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(lines) == len(results) == summary["rollouts"]
    assert sum(summary["statuses"].values()) == len({(r.task, r.attempt) for r in results})
    assert all(line["status"] in STATUSES for line in lines)
    return run_dir, results



def test_react_right_tool_call_succeeds_and_the_trajectory_is_recorded(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    run_dir, results = rollout(config(tmp_path, [task], attempts=2))
    assert [r.status for r in results] == ["success", "success"]
    assert all(r.reward == 1.0 and r.metrics == {"checked": "hello.txt"} for r in results)
    trajectory = json.loads((run_dir / results[0].trajectory).read_text())
    assert trajectory["status"] == "success" and trajectory["reward"] == 1.0
    assert trajectory["counts"]["clean"] == 2 and len(trajectory["segments"]) == 1
    segment = trajectory["segments"][0]
    assert len(segment["response_ids"]) == len(segment["response_mask"]) == len(segment["logprobs"])
    assert 0 < sum(segment["response_mask"]) < len(segment["response_mask"])  # tool output masked out
    assert results[0].timings["container_start_s"] > 0 and results[0].model_usage["calls"] == 2
    assert (run_dir / "config.yaml").exists()
    assert "write_file" in (run_dir / "logs" / results[0].rollout_id / "agent.stdout").read_text()
    assert (run_dir / "logs" / results[0].rollout_id / "verifier.stdout").exists()


def test_react_wrong_tool_call_is_a_policy_failure_with_reward_0(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    _, results = rollout(config(tmp_path, [task], turns=[WRITE_BYE, FINISH]))
    assert [(r.status, r.reward) for r in results] == [("failure", 0.0)]


def test_agent_written_reward_file_and_planted_test_script_are_ignored(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    cheat = ShellHarness("mkdir -p /logs/verifier /tests && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
                         " && printf 'exit 0' > /tests/test.sh"
                         " && (setsid sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' &)")
    _, results = rollout(config(tmp_path, [task]), harness=cheat)
    assert [(r.status, r.reward) for r in results] == [("failure", 0.0)]


def test_harness_crash_is_recorded_as_policy_failure_with_its_exit_code(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    _, results = rollout(config(tmp_path, [task]), harness=ShellHarness("kill -SEGV $$"))
    assert [(r.status, r.reward, r.harness_exit_code) for r in results] == [("failure", 0.0, 139)]


def test_hung_harness_is_an_agent_timeout(tmp_path: Path):
    task = make_task(tmp_path, "hello", agent_timeout=2)
    started = time.monotonic()
    _, results = rollout(config(tmp_path, [task]), harness=ShellHarness("sleep 600 & sleep 600"))
    assert [r.status for r in results] == ["agent_timeout"]
    assert time.monotonic() - started < 60


def test_verifier_crash_is_a_verifier_error(tmp_path: Path):
    task = make_task(tmp_path, "hello", test_sh="#!/bin/bash\necho boom >&2\nexit 2\n")
    _, results = rollout(config(tmp_path, [task]))
    assert results[0].status == "verifier_error" and "boom" in results[0].reason


def test_a_missing_image_fails_the_run_before_any_container_starts(tmp_path: Path):
    task = make_task(tmp_path, "hello", image="openforgerl/does-not-exist:1")
    with pytest.raises(UserError, match="openforgerl/does-not-exist:1 is not present locally") as raised:
        asyncio.run(run_rollouts(config(tmp_path, [task], retry_infra=1)))
    assert "forge build-env" in (raised.value.fix or "")
    assert not (tmp_path / "run").exists()


def test_an_engine_that_is_down_fails_the_run_before_any_container_starts(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    cfg = config(tmp_path, [task])
    cfg.proxy = ProxySettings(engine={"type": "vllm", "base_url": "http://127.0.0.1:9", "model": "smollm2",
                                      "timeout_s": 5})
    with pytest.raises(ProviderError, match="does not answer"):
        asyncio.run(run_rollouts(cfg))


def test_container_killed_mid_run_is_an_infra_error(tmp_path: Path):
    import docker

    task = make_task(tmp_path, "hello")
    client = docker.from_env()
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set():
            for container in client.containers.list(filters={"label": "openforgerl.run=run"}):
                container.kill()
                return
            time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        _, results = rollout(config(tmp_path, [task]), harness=ShellHarness("sleep 30"))
    finally:
        stop.set()
    assert results[0].status == "infra_error"


def test_nop_and_oracle_need_no_model_and_score_0_and_1(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    cfg = config(tmp_path, [task], harness="oracle")
    cfg.proxy = ProxySettings(engine={"type": "vllm", "base_url": "http://127.0.0.1:9"})  # never contacted
    _, oracle = rollout(cfg)
    assert [(r.status, r.reward, r.trajectory) for r in oracle] == [("success", 1.0, None)]
    cfg = config(tmp_path / "nop", [task], harness="nop")
    _, nop = rollout(cfg)
    assert [(r.status, r.reward) for r in nop] == [("failure", 0.0)]


def test_a_harness_oom_killed_itself_is_an_infra_error_not_a_policy_failure(tmp_path: Path):
    task = make_task(tmp_path, "hello", memory_mb=64)
    hog = ShellHarness("python3 -c 'x = bytearray(512 * 2**20)'")
    _, results = rollout(config(tmp_path, [task]), harness=hog)
    assert results[0].status == "infra_error" and "OOM" in results[0].reason


def test_a_harness_oom_killed_in_less_memory_than_it_declares_is_an_infra_error_naming_the_fix(tmp_path: Path):
    task = make_task(tmp_path, "hello", memory_mb=64)
    hog = ShellHarness("python3 -c 'x = bytearray(512 * 2**20)'", memory_mb=96)
    _, results = rollout(config(tmp_path, [task]), harness=hog)
    assert results[0].status == "infra_error"
    assert "memory_mb = 64 is under the 96 MB shell needs; raise it in hello's task.toml" in results[0].reason


def entrypoint(script: str) -> str:
    """A task Dockerfile whose ENTRYPOINT runs ``script`` (sh), then whatever it does with the command "$@"."""
    return BASE_DOCKERFILE + "ENTRYPOINT " + json.dumps(["sh", "-c", script, "--"]) + "\n"


# The environment's own service: 128 MB held from the sandbox's start, as a web app or a mail server of a GUI or
# claw task does; the entrypoint execs the command once it is up, as forge's templates do.
RESIDENT_SERVICE = entrypoint(
    "python3 -c 'import pathlib, time; x = bytearray(128 * 2**20); pathlib.Path(\"/tmp/up\").touch(); "
    "time.sleep(10**6)' & while [ ! -e /tmp/up ]; do sleep 0.05; done; exec \"$@\"")


def test_a_harness_oom_killed_where_the_environments_services_leave_it_no_room_is_an_infra_error(tmp_path: Path):
    """memory_mb = 192 holds the 96 MB the harness declares, but not beside the 128 MB the environment's service
    holds at rest: the harness's OOM kill is the task's sizing, not the policy's doing. Kept as a failure, it would
    teach the policy a loss it did not make; it is an infra error naming the fix (it was kept, reward 0)."""
    task = write_task(tmp_path, "hello", dockerfile=RESIDENT_SERVICE, environment={"memory_mb": 192})
    script = RAISE_AND_HOG.replace("for i in 1 2 3 4 5 6; do python3 -c 'import time; x = bytearray(40 * 2**20); "
                                   "time.sleep(3)' & done; wait", "python3 -c 'import time; "
                                   "x = bytearray(80 * 2**20); time.sleep(3)'")
    assert script != RAISE_AND_HOG
    _, results = rollout(config(tmp_path, [task]), harness=ShellHarness(script, memory_mb=96))
    assert [r.status for r in results] == ["infra_error"], (results[0].reason, results[0].sandbox)
    assert results[0].sandbox["memory_at_rest_mb"] >= 128
    assert "memory_mb = 192 is under the 96 MB shell needs beside the " in results[0].reason
    assert "MB its environment held before the agent started; raise it in hello's task.toml" in results[0].reason


def test_the_agent_starts_once_the_images_entrypoint_has_started_its_command(tmp_path: Path):
    """An entrypoint that takes 2 s to bring its service up before exec'ing the command: the agent finds it up.
    (It used to start at once, on an environment still coming up: a failure that was not the policy's.)"""
    task = write_task(tmp_path, "hello", dockerfile=entrypoint('sleep 2; echo up > /tmp/service; exec "$@"'))
    _, results = rollout(config(tmp_path, [task]), harness=ShellHarness(
        'test "$(cat /tmp/service)" = up && echo hi > /app/hello.txt'))
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)]
    assert results[0].timings["container_start_s"] >= 2


def test_an_entrypoint_that_never_starts_its_command_is_waited_for_once_then_warned_about(tmp_path: Path,
                                                                                           monkeypatch, caplog):
    monkeypatch.setattr(docker_runtime, "ENTRYPOINT_WAIT_S", 1.0)
    task = write_task(tmp_path, "hello", dockerfile=entrypoint("sleep 1000000"))  # ignores the command
    _, results = rollout(config(tmp_path, [task], attempts=2), harness=ShellHarness("echo hi > /app/hello.txt"))
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)] * 2  # the agent still runs
    warned = [r.message for r in caplog.records if "did not exec its command" in r.message]
    assert len(warned) == 1 and 'end with exec "$@"' in warned[0]  # the second sandbox did not wait


# A command of the agent's raises its harness's oom_score_adj (allowed: same user, raising needs no privilege;
# processes the command started before keep theirs) and fills the sandbox's memory from processes each smaller
# than the harness's raised score: the kernel OOM-kills the harness instead of them.
RAISE_AND_HOG = ("(sleep 0.5; for i in 1 2 3 4 5 6; do python3 -c 'import time; x = bytearray(40 * 2**20); "
                 "time.sleep(3)' & done; wait) & "
                 "python3 -c 'import os; open(f\"/proc/{os.getppid()}/oom_score_adj\", \"w\").write(\"1000\")'; "
                 "wait")


@pytest.mark.parametrize("solved", [False, True])
def test_an_agent_that_gets_its_harness_oom_killed_in_room_for_it_is_verified_and_kept(tmp_path: Path,
                                                                                         solved: bool):
    """Were this an infra error, a policy could escape any failure by killing its own harness this way."""
    task = make_task(tmp_path, "hello", memory_mb=128)
    script = ("echo hi > /app/hello.txt; " if solved else "") + RAISE_AND_HOG + "; echo never > /app/hello.txt"
    _, results = rollout(config(tmp_path, [task], retry_infra=1), harness=ShellHarness(script, memory_mb=32))
    expected = ("success", 1.0) if solved else ("failure", 0.0)
    assert [(r.status, r.reward, r.try_index) for r in results] == [(*expected, 0)], \
        (results[0].reason, results[0].sandbox)  # (a rare verifier_error in CI: this says which step failed)
    assert results[0].sandbox["harness_oom_killed"] and "OOM-killed" in results[0].sandbox["oom_killed"]
    assert results[0].harness_exit_code is not None and results[0].harness_exit_code != 0


def test_a_react_agent_whose_shell_command_gets_the_harness_oom_killed_scores_0_and_is_kept(tmp_path: Path):
    """The same through a real harness: forge's ReAct loop (it declares 64 MB) runs the policy's shell command,
    which raises the loop's own oom_score_adj ($PPID) and fills the sandbox's 192 MB."""
    task = make_task(tmp_path, "hello", memory_mb=192)
    command = RAISE_AND_HOG.replace("python3 -c 'import os; open(f\"/proc/{os.getppid()}/oom_score_adj\", "
                                    "\"w\").write(\"1000\")'", "echo 1000 > /proc/$PPID/oom_score_adj")
    assert command != RAISE_AND_HOG
    turns = [{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, WRITE_HI, FINISH]
    _, results = rollout(config(tmp_path, [task], turns, retry_infra=1))
    assert [(r.status, r.reward, r.try_index) for r in results] == [("failure", 0.0, 0)], \
        (results[0].reason, results[0].sandbox)  # (a rare verifier_error in CI: this says which step failed)
    assert results[0].sandbox["harness_oom_killed"] and results[0].harness_exit_code == 137


HOGS = "for i in 1 2 3 4 5 6; do python3 -c 'import time; x = bytearray(40 * 2**20); time.sleep(3)' & done; wait"
ROOT_ENDINGS = {
    # Docker marks the container OOMKilled once any process of it was; the agent then ends init itself
    "oom-then-term-init": "python3 -c 'x = bytearray(512 * 2**20)'; kill -TERM 1; sleep 5",
    # the kernel picks init as its victim: its oom_score_adj raised, the memory spread over smaller processes
    "raise-init-and-hog": f"echo 1000 > /proc/1/oom_score_adj; {HOGS}; sleep 3",
}


@pytest.mark.parametrize("ending", ROOT_ENDINGS)
def test_a_root_agent_that_gets_its_sandbox_oom_killed_scores_0_and_is_kept(tmp_path: Path, ending: str):
    """Both were `sandbox OOM-killed` infra errors, discarded and retried: a way out of every failure."""
    task = write_task(tmp_path, "hello", environment={"memory_mb": 128}, tables={"agent": {"user": "root"}})
    _, results = rollout(config(tmp_path, [task], retry_infra=1), harness=ShellHarness(ROOT_ENDINGS[ending], 32))
    assert [(r.status, r.reward, r.try_index) for r in results] == [("failure", 0.0, 0)], results[0].reason


def test_an_init_oom_killed_under_a_harness_that_declares_no_memory_need_stays_an_infra_error(tmp_path: Path):
    task = write_task(tmp_path, "hello", environment={"memory_mb": 128}, tables={"agent": {"user": "root"}})
    _, results = rollout(config(tmp_path, [task]), harness=ShellHarness(ROOT_ENDINGS["raise-init-and-hog"]))
    assert [(r.status, r.reason) for r in results] == [("infra_error", "sandbox OOM-killed")]


def test_an_agent_command_that_runs_out_of_memory_is_verified_and_kept_not_discarded(tmp_path: Path):
    """The kernel OOM-kills a command the agent ran and the harness goes on: the policy's doing, verified as usual.
    Discarding it as an infra error would let a policy escape any failure by running out of memory on purpose."""
    task = make_task(tmp_path, "hello", memory_mb=64)
    hog = "python3 -c 'x = bytearray(512 * 2**20)'; "
    _, solved = rollout(config(tmp_path / "solved", [task], retry_infra=1),
                        harness=ShellHarness(hog + "echo hi > /app/hello.txt"))
    _, gave_up = rollout(config(tmp_path / "gave-up", [task], retry_infra=1), harness=ShellHarness(hog + "exit 0"))
    assert [(r.status, r.reward, r.try_index) for r in solved + gave_up] == [("success", 1.0, 0), ("failure", 0.0, 0)]
    assert all("OOM-killed" in r.sandbox["oom_killed"] for r in solved + gave_up)


def test_forced_tool_calls_with_the_scripted_engine_still_succeed(tmp_path: Path):
    task = make_task(tmp_path, "hello")
    cfg = config(tmp_path, [task], harness_options={"tool_choice": "required"})
    run_dir, results = rollout(cfg)
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)]
    segment = json.loads((run_dir / results[0].trajectory).read_text())["segments"][0]
    assert segment["response_mask"][0] == 0  # the forced opening is the proxy's, not the policy's


def test_a_sharded_in_run_proxy_serves_sandboxes_on_the_isolated_network(tmp_path: Path):
    """proxy.workers=2: each shard listens on the network's gateway too, its port opened to the sandboxes;
    every rollout reaches its own shard and is recorded there."""
    task = make_task(tmp_path, "hello")
    cfg = config(tmp_path, [task], attempts=4)
    cfg.concurrency, cfg.proxy.workers = 2, 2
    run_dir, results = rollout(cfg)
    assert [r.status for r in results] == ["success"] * 4
    logs = [len(list((run_dir / "proxy" / f"shard-{i}" / "rollouts").glob("*.log"))) for i in range(2)]
    assert sorted(logs) == [2, 2]
    assert all((run_dir / r.trajectory).exists() for r in results)
