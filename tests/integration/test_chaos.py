"""A chaos run: 40 rollouts at concurrency 8 on 2 cores, mixing ordinary tasks with every hostile or
heavy case known to have broken a run before (hangs, a replaced system binary, 64 MiB of stdout, 1 GiB
in /logs, a huge prompt, deeply nested JSON, crashes, an OOM, a hung verifier, a writer left behind).

Every rollout ends in exactly one status within its budgets, the counts reconcile, nothing is left
running, and forge (orchestrator and in-run proxy in one process) stays under a stated memory bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import docker
import pytest

from openforgerl.rollout.runtime import LABEL_RUN
from openforgerl.testing.tasks import write_task

pytestmark = pytest.mark.docker

RSS_BOUND_MB = 1500
"""forge's own peak RSS (orchestrator + proxy + tokenizer), whatever the sandboxes print or write."""
AGENT_TIMEOUT, VERIFIER_TIMEOUT = 20, 10
SOLVE = "echo hi > /app/hello.txt"
CALL = """python3 - <<'EOF'
import json, os, urllib.request, urllib.error
body = {BODY}
request = urllib.request.Request(os.environ["FORGE_URL"] + "/v1/chat/completions", data=body.encode(),
                                 headers={{"authorization": "Bearer " + os.environ["FORGE_KEY"],
                                          "content-type": "application/json"}})
try:
    print("status", urllib.request.urlopen(request, timeout=60).status)
except urllib.error.HTTPError as exc:
    print("status", exc.code)
EOF"""
HUGE = 'json.dumps({"model": "m", "messages": [{"role": "user", "content": "w " * 12_000_000}]})'
DEEP = '\'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": \' + "[" * 300 + "1" + "]" * 300 + "}"'
LATE_TEST = ("#!/bin/bash\nmkdir -p /logs/verifier; rm -f /app/hello.txt; sleep 2\n"
             '[ "$(cat /app/hello.txt 2>/dev/null)" = hi ] && r=1 || r=0\n'
             'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n')

# name: (attempts, solve.sh body, task options, the one status every attempt must end in)
CASES = {
    "normal": (10, SOLVE, {}, "success"),
    "hang": (5, "sleep 600", {}, "agent_timeout"),
    "replaced-cut": (3, "cp /bin/false /usr/bin/cut", {"tables": {"agent": {"user": "root"}}}, "failure"),
    "stdout-64m": (3, f"head -c 64M /dev/zero | tr '\\\\0' x; {SOLVE}", {}, "success"),
    "logs-1g": (2, f"head -c 1024M /dev/zero > /logs/agent/big.bin; {SOLVE}", {}, "success"),
    "huge-prompt": (3, CALL.format(BODY=HUGE), {}, "failure"),
    "deep-json": (2, CALL.format(BODY=DEEP), {}, "failure"),
    "crash": (2, "kill -SEGV $$", {}, "failure"),
    "oom": (2, "python3 -c 'x = bytearray(512 * 2**20)'", {"environment": {"memory_mb": 64}}, "infra_error"),
    "verifier-hang": (2, SOLVE, {"test_sh": "#!/bin/bash\nsleep 600\n"}, "verifier_error"),
    "writer-left-behind": (6, "nohup sh -c 'while true; do echo hi > /app/hello.txt; sleep 0.05; done' "
                              "> /dev/null 2>&1 &", {"test_sh": LATE_TEST}, "failure"),
}

RUNNER = textwrap.dedent('''
    import asyncio, json, resource, sys
    from openforgerl.rollout.harness import AgentContext, Harness, Invocation
    from openforgerl.rollout.orchestrator import RolloutConfig
    from openforgerl.rollout.run import run_rollouts
    from openforgerl.tasks import SOLUTION_SCRIPT

    class Scripted(Harness):
        """Runs the task's solve.sh as the agent, with the proxy's URL and its rollout token."""
        name = "scripted"
        async def prepare(self, sandbox, task):
            await sandbox.put(task.solution_dir, "/")
        def invocation(self, ctx: AgentContext) -> Invocation:
            return Invocation(["bash", "/" + SOLUTION_SCRIPT], {"FORGE_URL": ctx.base_url, "FORGE_KEY": ctx.api_key})

    config = RolloutConfig.model_validate(json.loads(sys.argv[1]))
    run_dir, results = asyncio.run(run_rollouts(config, harness=Scripted()))
    print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "run_dir": str(run_dir), "results": [vars(r) for r in results]}, default=str))
''')


def test_a_chaos_run_ends_every_rollout_in_one_status_within_its_budgets(tmp_path: Path):
    tasks = [str(write_task(tmp_path / "tasks", f"{name}-{n}", solution=f"#!/bin/bash\n{solve}\n", **options))
             for name, (attempts, solve, options, _) in CASES.items() for n in range(attempts)]
    assert len(tasks) == 40
    config = {"tasks": tasks, "harness": "chaos", "concurrency": 8, "run_dir": str(tmp_path / "run"),
              "agent_timeout_sec": AGENT_TIMEOUT, "verifier_timeout_sec": VERIFIER_TIMEOUT,
              "proxy": {"engine": {"type": "scripted"}, "max_context_tokens": 8192}}
    out = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(config)], capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    results = report["results"]
    run_dir = Path(report["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(results) == len(lines) == summary["rollouts"] == 40
    assert len({line["rollout_id"] for line in lines}) == 40
    for name, (attempts, _, _, status) in CASES.items():
        got = [r for r in results if r["task"].rsplit("-", 1)[0] == name]
        assert len(got) == attempts and {r["status"] for r in got} == {status}, (name, [
            (r["status"], r["reason"][:200]) for r in got])
    for result in results:  # budgets: the agent timeout is enforced within seconds at concurrency 8
        assert result["timings"].get("harness_s", 0) <= AGENT_TIMEOUT + 15, result
    assert all(r["sandbox"].get("tampered") for r in results if r["task"].startswith("replaced-cut"))
    assert all(r["sandbox"]["logs"]["truncated"] for r in results if r["task"].startswith("logs-1g"))
    print(f"chaos run: {len(results)} rollouts, forge peak RSS {report['rss_mb']:.0f} MB, "
          f"statuses {summary['statuses']}")
    assert report["rss_mb"] < RSS_BOUND_MB
    assert docker.from_env().containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_dir.name}"}) == []
