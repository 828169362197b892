"""Verifiers compiled into real tasks and run by the orchestrator in real containers.

A composed claw verifier: oracle (solve.sh) must score 1, nop 0, and an agent that plants reward
files, a fake runner and Python start-up hooks must still score 0. A code task on the code
template: its test suite decides, and a pytest.py planted in the repo cannot fake a pass.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.envs.render import render_environment
from openforgerl.rollout.harness import Harness
from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.harnesses import ShellHarness
from openforgerl.testing.tasks import write_task
from openforgerl.verifiers import compile_verifier

pytestmark = pytest.mark.docker

SOLVE = """#!/bin/bash
set -e
cd /app
python3 - <<'PY'
import json, sqlite3
db = sqlite3.connect("/app/shop.db")
db.executescript("create table orders(item text, qty integer); insert into orders values ('apple', 3);")
db.commit()
json.dump({"order": {"item": "apple", "qty": 3}, "status": "placed"}, open("/app/receipt.json", "w"))
PY
printf 'Order placed: 3 x apple\\n' > /app/log.txt
"""

VERIFIER = {
    "type": "all",
    "checks": [
        {"type": "file_regex", "name": "log", "path": "/app/log.txt", "pattern": r"^Order placed: 3 x apple$"},
        {"type": "json_path", "name": "receipt", "path": "/app/receipt.json", "json_path": "$.order.qty",
         "equals": 3},
        {"type": "sqlite", "name": "db", "database": "/app/shop.db", "query": "select item, qty from orders",
         "expect_rows": [["apple", 3]]},
        {"type": "weighted", "name": "extras", "pass_threshold": 1.0, "checks": [
            {"type": "command", "command": "python3 -c \"import json; assert json.load(open('receipt.json'))"
                                           "['status'] == 'placed'\""},
            {"type": "file_exists", "path": "/app/notes.txt", "absent": True},
        ]},
    ],
}



def make_task(root: Path, user: str | None = None) -> Path:
    task = write_task(root, "shop", test_sh=None, solution=SOLVE,
                      instruction="Place an order for 3 apples: record it in /app/shop.db (table orders), "
                                  "write /app/receipt.json and log it in /app/log.txt.\n",
                      tables={"agent": {"user": user}} if user else None)
    compile_verifier(VERIFIER, task / "tests")
    return task


def rollout(tmp_path: Path, task: Path, harness: str = "nop", agent: Harness | None = None):
    config = RolloutConfig(tasks=[str(task)], harness=harness, concurrency=1, run_dir=str(tmp_path / harness))
    _, results = asyncio.run(run_rollouts(config, harness=agent))
    assert len(results) == 1
    return results[0]


def test_oracle_scores_1_and_nop_scores_0_with_every_check_reported(tmp_path: Path):
    task = make_task(tmp_path)
    oracle = rollout(tmp_path, task, "oracle")
    assert (oracle.status, oracle.reward) == ("success", 1.0), oracle.reason
    assert set(oracle.metrics["checks"]) == {"log", "receipt", "db", "extras"}
    assert all(check["reward"] == 1.0 for check in oracle.metrics["checks"].values())

    nop = rollout(tmp_path, task, "nop")
    assert (nop.status, nop.reward) == ("failure", 0.0), nop.reason
    assert "FileNotFoundError" in nop.metrics["checks"]["log"]["error"]
    assert "does not exist" in nop.metrics["checks"]["db"]["error"]


def test_planted_rewards_runner_and_python_hooks_do_not_raise_the_reward(tmp_path: Path):
    task = make_task(tmp_path, user="root")  # a root agent: everything it can plant, it plants
    hook = "import json, os\\nos.makedirs('/logs/verifier', exist_ok=True)\\n" \
           "open('/logs/verifier/reward.json', 'w').write(json.dumps({'reward': 1}))\\nos._exit(0)\\n"
    cheat = ShellHarness(
        "mkdir -p /logs/verifier /tests && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
        " && printf '#!/bin/bash\\nexit 0\\n' > /tests/test.sh && cp /tests/test.sh /tests/forge_verify.py"
        f" && printf \"{hook}\" > /app/json.py && cp /app/json.py /app/forge_state.py"
        " && echo 'Order placed: 3 x apple' > /app/log.txt")
    result = rollout(tmp_path, task, "shell", agent=cheat)
    assert (result.status, result.reward) == ("failure", 0.0), result.reason
    assert result.metrics["checks"]["log"]["reward"] == 1.0  # the one thing it really did counts
    assert json.dumps(result.metrics).count('"reward": 0.0') >= 2
    # a hook in the system's own site-packages does not even reach the verifier: the guard ends the rollout
    site = ShellHarness(f"printf \"{hook}\" > /usr/lib/python3/dist-packages/sitecustomize.py")
    result = rollout(tmp_path / "site", task, "shell", agent=site)
    assert (result.status, result.reward) == ("failure", 0.0), result.reason
    assert result.sandbox["tampered"] == ["/usr/lib/python3/dist-packages/sitecustomize.py"]


CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return b - a\n"
CALC_TESTS = """from calc import add, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2


def test_sub_negative():
    assert sub(-1, 1) == -2
"""
FIX = "#!/bin/bash\nsed -i 's/return b - a/return a - b/' /app/calc.py\n"
FAKE_PYTEST = ("import sys\\nr = [a[11:] for a in sys.argv if a.startswith('--junitxml=')][0]\\n"
               "open(r, 'w').write('<testsuite><testcase name=\\\"a\\\"/></testsuite>')\\n")


def make_code_task(root: Path) -> Path:
    task = root / "calc"
    for sub in ("environment/repo", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "calc"\ndomain = "code"\n[agent]\ntimeout_sec = 60\n'
                                    '[environment]\ntemplate = "code"\n')
    (task / "instruction.md").write_text("sub() in /app/calc.py returns the wrong sign; fix it.\n")
    (task / "environment" / "repo" / "calc.py").write_text(CALC)
    (task / "solution" / "solve.sh").write_text(FIX)
    render_environment(task)
    compile_verifier({"type": "test_suite", "args": ["/tests/test_calc.py"], "expect_total": 3}, task / "tests")
    (task / "tests" / "test_calc.py").write_text(CALC_TESTS)
    return task


def test_code_task_is_scored_by_its_test_suite(tmp_path: Path):
    task = make_code_task(tmp_path)
    oracle = rollout(tmp_path, task, "oracle")
    assert (oracle.status, oracle.reward) == ("success", 1.0), json.dumps(oracle.metrics)[:2000] + oracle.reason
    assert oracle.metrics["passed"] == 3

    nop = rollout(tmp_path, task, "nop")
    assert (nop.status, nop.reward) == ("failure", 0.0), nop.reason
    assert (nop.metrics["passed"], nop.metrics["failed"]) == (1, 2)

    cheat = ShellHarness(f"printf \"{FAKE_PYTEST}\" > /app/pytest.py && cp /app/pytest.py /app/conftest.py")
    result = rollout(tmp_path, task, "shell", agent=cheat)
    assert (result.status, result.reward) == ("failure", 0.0), json.dumps(result.metrics)[:2000]
