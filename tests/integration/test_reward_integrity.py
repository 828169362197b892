"""Reward integrity on a real Docker engine: every way an agent tried to forge its reward scores 0.

Each hack is the task's ``solution/solve.sh``, run by the ``oracle`` harness (no model needed), once
as root (the task declares ``[agent] user = "root"``) and once as the image's unprivileged agent. No
hack does the task (write ``hi`` into /app/hello.txt); a hack that worked would score 1.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.tasks import write_task

pytestmark = pytest.mark.docker

# The verifier reads the answer with python3 (as most do), as root.
PY_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
r=$(python3 -c 'print(1 if open("/app/hello.txt").read().strip() == "hi" else 0)' 2>/dev/null || echo 0)
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
# For writers: the file must appear while the verifier runs, which only a process left behind can do.
LATE_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier; rm -f /app/hello.txt; sleep 2
[ "$(cat /app/hello.txt 2>/dev/null)" = hi ] && r=1 || r=0
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
FORGE_REWARD = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt"
HACKS = {
    "python3-replaced": (PY_TEST_SH, f"printf '#!/bin/sh\\n{FORGE_REWARD}\\nprint(1)\\n' > /tmp/py && chmod +x /tmp/py"
                                     " && cp /tmp/py /usr/bin/python3"),
    "ld-so-preload": (PY_TEST_SH, "echo /tmp/evil.so > /etc/ld.so.preload"),
    "sitecustomize": (PY_TEST_SH, "printf 'import os\\nos.makedirs(\"/logs/verifier\", exist_ok=True)\\n"
                                  "open(\"/app/hello.txt\", \"w\").write(\"hi\")\\n' "
                                  "> /usr/lib/python3/dist-packages/sitecustomize.py"),
    "pth-file": (PY_TEST_SH, "mkdir -p /usr/local/lib/python3.11/dist-packages && printf "
                             "'import os; open(\"/app/hello.txt\", \"w\").write(\"hi\")\\n' "
                             "> /usr/local/lib/python3.11/dist-packages/zz.pth"),
    "sh-replaced": (PY_TEST_SH, f"printf '#!/bin/bash\\n{FORGE_REWARD}\\n' > /tmp/sh && chmod +x /tmp/sh"
                                " && ln -sf /tmp/sh /bin/sh"),
    "path-etc-environment": (PY_TEST_SH, f"mkdir -p /tmp/evil && printf '#!/bin/sh\\n{FORGE_REWARD}\\n' > "
                                         "/tmp/evil/python3 && chmod +x /tmp/evil/python3 && "
                                         "echo PATH=/tmp/evil:/usr/bin:/bin >> /etc/environment"),
    "path-profile-d": (PY_TEST_SH, "mkdir -p /tmp/evil && echo 'export PATH=/tmp/evil:$PATH' > "
                                   "/etc/profile.d/evil.sh"),
    "background-writer": (LATE_TEST_SH, "nohup sh -c 'sleep 1; while true; do echo hi > /app/hello.txt; "
                                        "sleep 0.05; done' > /dev/null 2>&1 &"),
    "reforking-writer": (LATE_TEST_SH, "cat > /tmp/hop.sh <<'EOF'\n#!/bin/bash\nsleep 0.01\n"
                                       "[ -e /tmp/armed ] && echo hi > /app/hello.txt\n"
                                       "bash /tmp/hop.sh < /dev/null > /dev/null 2>&1 &\nEOF\n"
                                       "(sleep 1; touch /tmp/armed) > /dev/null 2>&1 &\n"
                                       "bash /tmp/hop.sh < /dev/null > /dev/null 2>&1 &"),
    "ptrace-spared-process": (LATE_TEST_SH, "python3 - <<'EOF'\nimport ctypes, os, subprocess\n"
                                            "libc = ctypes.CDLL(None, use_errno=True)\n"
                                            "pid = int(subprocess.check_output(['pgrep', '-o', '-x', 'sleep']))\n"
                                            "print('attach', pid, libc.ptrace(16, pid, 0, 0))\nEOF\n"
                                            "nohup sh -c 'while true; do echo hi > /app/hello.txt; sleep 0.05; "
                                            "done' > /dev/null 2>&1 &"),
    "planted-reward-file": (PY_TEST_SH, f"{FORGE_REWARD}; echo '{{\"reward\": 1}}' > /logs/verifier/reward.json"),
}
GUARDED = {"python3-replaced", "ld-so-preload", "sitecustomize", "pth-file", "sh-replaced", "path-etc-environment",
           "path-profile-d"}


def task_for(root: Path, name: str, test_sh: str, solve: str, user: str) -> Path:
    agent = {"user": "root"} if user == "root" else {}
    return write_task(root, f"{name}-{user}", test_sh=test_sh, solution=f"#!/bin/bash\n{solve}\nexit 0\n",
                      tables={"agent": agent} if agent else None)


def test_every_forgery_scores_0_as_root_and_as_the_agent_user(tmp_path: Path):
    tasks = [task_for(tmp_path / "tasks", name, test_sh, solve, user)
             for name, (test_sh, solve) in HACKS.items() for user in ("root", "agent")]
    config = RolloutConfig(tasks=[str(t) for t in tasks], harness="oracle", concurrency=4,
                           run_dir=str(tmp_path / "run"))
    _, results = asyncio.run(run_rollouts(config))
    outcome = {r.task: (r.status, r.reward, r.sandbox.get("tampered")) for r in results}
    assert len(outcome) == 2 * len(HACKS)
    for task, (status, reward, tampered) in outcome.items():
        assert (status, reward) == ("failure", 0.0), (task, outcome[task], [r.reason for r in results
                                                                            if r.task == task])
        name, user = task.rsplit("-", 1)
        if user == "root" and name in GUARDED:
            assert tampered, task  # caught by the guard, recorded for training and reports
        if user == "agent":
            assert not tampered, task  # an unprivileged agent cannot even write there


def test_a_root_task_may_change_the_system_paths_it_declares(tmp_path: Path):
    solve = "mkdir -p /usr/local/lib/forge-legit && echo x > /usr/local/lib/forge-legit/tool && echo hi > /app/hello.txt"
    task = write_task(tmp_path, "legit", test_sh=PY_TEST_SH, solution=f"#!/bin/bash\n{solve}\n",
                      tables={"agent": {"user": "root", "writable_paths": ["/usr/local/lib/forge-legit"]}})
    undeclared = write_task(tmp_path, "undeclared", test_sh=PY_TEST_SH, solution=f"#!/bin/bash\n{solve}\n",
                            tables={"agent": {"user": "root"}})
    config = RolloutConfig(tasks=[str(task), str(undeclared)], harness="oracle", run_dir=str(tmp_path / "run"))
    _, results = asyncio.run(run_rollouts(config))
    by_task = {r.task: r for r in results}
    assert (by_task["legit"].status, by_task["legit"].reward) == ("success", 1.0)
    assert by_task["undeclared"].sandbox["tampered"] == ["/usr/local/lib/forge-legit/tool"]


def test_a_2_gib_write_under_storage_mb_100_is_stopped(tmp_path: Path):
    solve = "head -c 2048M /dev/zero > /app/fill.bin; echo hi > /app/hello.txt"
    task = write_task(tmp_path, "fill", solution=f"#!/bin/bash\n{solve}\n", environment={"storage_mb": 100})
    config = RolloutConfig(tasks=[str(task)], harness="oracle", run_dir=str(tmp_path / "run"), storage_poll_sec=0.2)
    _, [result] = asyncio.run(run_rollouts(config))
    assert (result.status, result.reward) == ("failure", 0.0)
    assert 100 < result.sandbox["storage_exceeded_mb"] < 2048  # stopped long before the 2 GiB landed


def test_a_symlink_and_a_fifo_in_logs_keep_the_rollout_s_real_status_and_reward(tmp_path: Path):
    solve = "echo hi > /app/hello.txt; ln -s /app /logs/agent/workspace; ln -s /etc/shadow /logs/agent/s; " \
            "mkfifo /logs/agent/pipe"
    task = write_task(tmp_path, "links", solution=f"#!/bin/bash\n{solve}\n")
    config = RolloutConfig(tasks=[str(task)], harness="oracle", run_dir=str(tmp_path / "run"))
    run_dir, [result] = asyncio.run(run_rollouts(config))
    assert (result.status, result.reward) == ("success", 1.0)
    assert sorted(result.sandbox["logs"]["skipped"]) == ["logs/agent/pipe: fifo", "logs/agent/s: link",
                                                        "logs/agent/workspace: link"]
    line = json.loads((run_dir / "rollouts.jsonl").read_text())
    assert line["status"] == "success"
    import docker

    assert not docker.from_env().containers.list(all=True, filters={"label": f"openforgerl.run={run_dir.name}"})


def test_an_agent_that_ends_its_own_container_scores_0_and_is_not_discarded(tmp_path: Path):
    """A root agent can end its container's init (``kill 1``); were that an infra error, the rollout would be
    discarded and retried, a way out of every failure. It is the policy's failure, reward 0, kept. (A kill from
    outside stays an infra error: tests/integration/test_rollout.py, test_container_killed_mid_run...)"""
    ends = {"term-init": "kill -TERM 1; sleep 5", "int-init": "kill -INT 1; sleep 5", "kill-all": "kill -KILL -1"}
    tasks = [task_for(tmp_path / "tasks", name, PY_TEST_SH, solve, user)
             for name, solve in ends.items() for user in ("root", "agent")]
    config = RolloutConfig(tasks=[str(t) for t in tasks], harness="oracle", concurrency=3, retry_infra=1,
                           run_dir=str(tmp_path / "run"))
    _, results = asyncio.run(run_rollouts(config))
    outcome = {r.task: (r.status, r.reward, r.sandbox.get("ended_by_agent"), r.reason) for r in results}
    assert len(results) == len(outcome) == len(tasks), outcome  # one try each: nothing was retried
    for task, (status, reward, ended, reason) in outcome.items():
        assert (status, reward) == ("failure", 0.0), (task, reason)
        if task.endswith("-agent"):
            assert not ended, (task, reason)  # the agent user cannot signal init
    # (a root agent's container ended, or ended as the seal restarted it: either way, a kept failure)
    assert any(ended for _, _, ended, _ in outcome.values()), outcome



# A verifier that runs the agent's program, as many do (as root).
RUN_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
out=$(python3 /app/solution.py 2>/dev/null)
[ "$out" = hi ] && r=1 || r=0
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""


def test_an_agent_program_that_ends_its_verifier_scores_0_and_is_not_discarded(tmp_path: Path):
    """The verifier runs what the agent wrote. A program that kills the verifier (no reward written) or ends the
    container's init under it would, as a discarded verifier_error or infra_error, be a way out of every failure:
    both are the policy's failure, reward 0, kept; a program that does the task still scores 1."""
    programs = {"kills-its-verifier": "import os, signal; os.kill(os.getppid(), signal.SIGKILL)",
                "kills-its-group": "import os, signal; os.killpg(0, signal.SIGKILL)",
                "ends-init": "import os, signal, time; os.kill(1, signal.SIGTERM); time.sleep(5)",
                "solves": "print('hi')"}
    tasks = [write_task(tmp_path / "tasks", name, test_sh=RUN_TEST_SH,
                        solution=f"#!/bin/bash\ncat > /app/solution.py <<'EOF'\n{program}\nEOF\n")
             for name, program in programs.items()]
    config = RolloutConfig(tasks=[str(t) for t in tasks], harness="oracle", concurrency=2, retry_infra=1,
                           run_dir=str(tmp_path / "run"))
    _, results = asyncio.run(run_rollouts(config))
    outcome = {r.task: (r.status, r.reward, r.reason) for r in results}
    assert len(results) == len(tasks), outcome  # one try each: nothing was retried
    assert outcome["solves"][:2] == ("success", 1.0), outcome
    for name in ("kills-its-verifier", "kills-its-group", "ends-init"):
        assert outcome[name][:2] == ("failure", 0.0), (name, outcome[name])
    assert "ended its own sandbox" in outcome["ends-init"][2], outcome["ends-init"]


def test_an_agent_program_that_hangs_its_verifier_scores_0_and_a_verifier_that_hangs_by_itself_is_discarded(
        tmp_path: Path):
    """A program that makes the verifier run past its timeout (it loops, or sleeps) would, as a discarded
    verifier_error, be a way out of every failure. The same verifier on a fresh container of the image (no agent)
    ends at once, so the hang is the policy's: reward 0, kept. A test.sh that hangs whatever the agent did is the
    verifier's own fault: a verifier_error, as before."""
    hang_sh = "#!/bin/bash\nsleep 600\n"
    tasks = [write_task(tmp_path / "tasks", name, test_sh=test_sh,
                        solution=f"#!/bin/bash\ncat > /app/solution.py <<'EOF'\n{program}\nEOF\n")
             for name, program, test_sh in [("loops", "while True: pass", RUN_TEST_SH),
                                            ("sleeps", "import time; time.sleep(600)", RUN_TEST_SH),
                                            ("solves", "print('hi')", RUN_TEST_SH),
                                            ("verifier-hangs", "print('hi')", hang_sh)]]
    config = RolloutConfig(tasks=[str(t) for t in tasks], harness="oracle", concurrency=2, retry_infra=1,
                           verifier_timeout_sec=8, run_dir=str(tmp_path / "run"))
    _, results = asyncio.run(run_rollouts(config))
    outcome = {r.task: (r.status, r.reward, r.reason) for r in results}
    assert len(results) == len(tasks), outcome  # one try each: nothing was retried
    assert outcome["solves"][:2] == ("success", 1.0), outcome
    for name in ("loops", "sleeps"):
        assert outcome[name][:2] == ("failure", 0.0) and "on the agent's work" in outcome[name][2], outcome[name]
    assert outcome["verifier-hangs"][:2] == ("verifier_error", None), outcome["verifier-hangs"]
    assert "untouched image too" in outcome["verifier-hangs"][2], outcome["verifier-hangs"]
