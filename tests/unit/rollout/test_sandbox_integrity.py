"""Between agent and verifier, on the fake runtime: the agent's processes end, the guard reads what it
changed, declared limits hold, and /logs is copied without costing the rollout its outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from orchestration import run, statuses

from openforgerl.rollout.integrity import is_guarded, tampered
from openforgerl.testing.runtime import FakeRuntime, Scenario, exits, hangs, leaves_writer, reward, writes


def rewards_if(path: str, text: str):
    """A verifier that gives 1 when ``path`` holds ``text`` at the moment it runs."""
    async def step(box, command, timeout):
        found = box.path(path).read_text() if box.path(path).is_file() else None
        return await reward(1.0 if found == text else 0.0)(box, command, timeout)
    return step


def verifier_ran(runtime: FakeRuntime) -> bool:
    return any(argv[-2:] == ["bash", "/tests/test.sh"] for argv, _, _ in runtime.sandboxes[0].execs)


def test_a_writer_the_agent_left_running_is_ended_before_the_verifier(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=leaves_writer("/app/hello.txt", "hi"),
                                   verifier=rewards_if("/app/hello.txt", "hi")))
    _, results = run(tmp_path, runtime)
    assert statuses(results) == [("failure", 0.0)]
    assert runtime.sandboxes[0].ended == ["agent"]


@pytest.mark.parametrize("path", ["/usr/bin/python3", "/etc/ld.so.preload", "/usr/lib/python3/dist-packages/x.pth",
                                  "/etc/profile.d/path.sh", "/etc/environment", "/bin/sh", "/opt/forge/tools/bin/x",
                                  "/opt/venv/lib/python3.11/site-packages/sitecustomize.py"])
def test_a_changed_system_path_fails_the_rollout_as_tampered_without_running_the_verifier(tmp_path: Path, path: str):
    runtime = FakeRuntime(Scenario(agent=writes(path, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")))
    run_dir, [result] = run(tmp_path, runtime)
    assert (result.status, result.reward) == ("failure", 0.0)
    assert result.sandbox["tampered"] == [path] and "tampered" in result.reason
    assert not verifier_ran(runtime)
    line = json.loads((run_dir / "rollouts.jsonl").read_text())
    assert line["sandbox"]["tampered"] == [path]


def test_a_system_path_the_task_declares_writable_is_allowed(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=writes("/usr/local/lib/python3.11/dist-packages/tool.py", "x = 1\n")))
    _, results = run(tmp_path, runtime, task={"tables": {"agent": {"user": "root",
                                                                   "writable_paths": ["/usr/local/lib/python3.11"]}}})
    assert statuses(results) == [("success", 1.0)]
    assert runtime.sandboxes[0].ended == ["root"]


def test_the_workdir_and_scratch_dirs_are_the_agent_s(tmp_path: Path):
    agent = writes("/app/.venv/lib/python3.11/site-packages/pkg.py", "x",
                   then=writes("/tmp/forge-home/.local/lib/python3.11/site-packages/y.pth", "y"))
    _, results = run(tmp_path, FakeRuntime(Scenario(agent=agent)))
    assert statuses(results) == [("success", 1.0)] and "tampered" not in results[0].sandbox


def test_a_runtime_that_cannot_see_changes_says_the_rollout_was_unchecked(tmp_path: Path):
    class Blind(FakeRuntime):
        async def start(self, spec):
            box = await super().start(spec)
            box.sees_changes = False
            return box

    _, [result] = run(tmp_path, Blind(Scenario(agent=writes("/usr/bin/python3", "x"))))
    assert result.status == "success" and result.sandbox["integrity"].startswith("unchecked")


def test_guarded_paths():
    assert is_guarded("/usr/bin/env") and is_guarded("/lib64/ld-linux-x86-64.so.2")
    assert is_guarded("/home/agent/.local/lib/python3.11/site-packages/x.pth")
    assert not is_guarded("/app/main.py") and not is_guarded("/etc/hosts") and not is_guarded("/usrx/y")
    assert tampered(["/usr/bin/x", "/app/y", "/usr/local/lib/z"], ["/usr/local/lib"], "/app") == ["/usr/bin/x"]


def test_writing_past_storage_mb_stops_the_agent_and_fails_the_rollout(tmp_path: Path):
    big = writes("/app/fill.bin", "x" * (2 * 1024 * 1024), then=hangs())
    runtime = FakeRuntime(Scenario(agent=big))
    _, [result] = run(tmp_path, runtime, storage_poll_sec=0.05, agent_timeout_sec=30,
                      task={"environment": {"storage_mb": 1}})
    assert (result.status, result.reward) == ("failure", 0.0)
    assert result.sandbox["storage_exceeded_mb"] >= 2 and "storage_mb = 1" in result.reason
    assert result.timings["harness_s"] < 10  # stopped by the watchdog, not by the agent timeout
    assert not verifier_ran(runtime)


def test_writing_under_storage_mb_is_fine(tmp_path: Path):
    runtime = FakeRuntime(Scenario(agent=writes("/app/small.txt", "x" * 1000)))
    _, results = run(tmp_path, runtime, storage_poll_sec=0.05, task={"environment": {"storage_mb": 1}})
    assert statuses(results) == [("success", 1.0)]


def test_links_and_fifos_in_logs_are_left_out_and_the_outcome_stands(tmp_path: Path):
    async def plant(box, command, timeout):
        logs = box.path("/logs/agent")
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "workspace").symlink_to("/app")
        (logs / "escape").symlink_to("/etc/passwd")
        import os
        os.mkfifo(logs / "pipe")
        (logs / "notes.txt").write_text("kept")
        return await exits(0)(box, command, timeout)

    run_dir, [result] = run(tmp_path, FakeRuntime(Scenario(agent=plant)))
    assert statuses([result]) == [("success", 1.0)]
    copied = run_dir / "logs" / result.rollout_id / "logs" / "agent"
    assert (copied / "notes.txt").read_text() == "kept"
    assert not any(p.is_symlink() for p in copied.iterdir()) and not (copied / "pipe").exists()
    assert sorted(result.sandbox["logs"]["skipped"]) == ["logs/agent/escape: link", "logs/agent/pipe: special file",
                                                        "logs/agent/workspace: link"]


def test_logs_past_the_cap_are_cut_and_said_so(tmp_path: Path):
    agent = writes("/logs/agent/a.bin", "a" * 600_000, then=writes("/logs/agent/b.bin", "b" * 600_000))
    run_dir, [result] = run(tmp_path, FakeRuntime(Scenario(agent=agent)), logs_max_mb=1)
    assert result.status == "success" and result.sandbox["logs"]["truncated"] is True
    kept = list((run_dir / "logs" / result.rollout_id / "logs" / "agent").iterdir())
    assert sum(p.stat().st_size for p in kept) <= 1024 * 1024


def test_who_the_agent_runs_as(tmp_path: Path):
    harbor = '[agent]\ntimeout_sec = 60\n'  # a Harbor task: no [task] table
    cases = [({}, {}, "agent"), ({"toml": harbor}, {}, "root"),
             ({"tables": {"agent": {"user": "1001:1001"}}}, {}, "1001:1001"), ({}, {"agent_user": "root"}, "root")]
    for n, (task, config, user) in enumerate(cases):
        runtime = FakeRuntime(Scenario())
        run(tmp_path / str(n), runtime, task=task, **config)
        assert runtime.sandboxes[0].ended == [user]
        agent_user = [u for argv, u, _ in runtime.sandboxes[0].execs if argv[0] == "agent"]
        assert agent_user == [user]


def test_network_modes(tmp_path: Path):
    cases = [({}, {}, "isolated"), ({"environment": {"network": "bridge"}}, {}, "bridge"),
             ({"environment": {"network": "bridge"}}, {"network": "host"}, "host"), ({}, {"network": "none"}, "none")]
    for n, (task, config, mode) in enumerate(cases):
        runtime = FakeRuntime(Scenario())
        run(tmp_path / str(n), runtime, task=task, **config)
        assert runtime.sandboxes[0].spec.network == mode
