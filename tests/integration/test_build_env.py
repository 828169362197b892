"""forge build-env end to end: real Docker builds, real nop/oracle containers, the real local registry.

One task per domain (claw with its mail and calendar services, code with pytest, gui checked with
Debian's Chromium). The only stand-in is the repair model (``openforgerl.testing.openai_stub``:
canned OpenAI-compatible replies on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import httpx
import pytest

from openforgerl.envs.build import BuildEnvConfig, build_envs
from openforgerl.manifest import read_manifest
from openforgerl.testing.openai_stub import ScriptedChatServer

pytestmark = pytest.mark.docker

HELLO_TEST = """#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = hi ]; then r=1; else r=0; fi
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""
HELLO_SOLVE = "#!/bin/bash\necho hi > /app/hello.txt\n"
HELLO_INSTRUCTION = "Create the file /app/hello.txt containing hi.\n"


def write(task: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


def hello_task(root: Path, name: str, dockerfile: str, **overrides: str) -> Path:
    files = {"task.toml": f'[task]\nname = "{name}"\ndomain = "claw"\n[agent]\ntimeout_sec = 60\n',
             "instruction.md": HELLO_INSTRUCTION, "environment/Dockerfile": dockerfile,
             "tests/test.sh": HELLO_TEST, "solution/solve.sh": HELLO_SOLVE}
    return write(root / name, {**files, **overrides})


def unique_dockerfile() -> str:
    # A fresh environment per test run, so "built once" is measured, not inherited from an earlier run.
    return f"FROM openforgerl/base:bookworm\nLABEL test.run={uuid.uuid4().hex}\nRUN mkdir -p /app\nWORKDIR /app\n"


def forge(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          timeout=900, env=env)


def build(tmp_path: Path, tasks: list[Path], **kw) -> tuple:
    config = BuildEnvConfig(tasks=[str(t) for t in tasks], out_dir=str(tmp_path / "out"),
                            manifest=str(tmp_path / "manifest.jsonl"), **kw)
    report = asyncio.run(build_envs(config))
    return report, {o.task: o for o in report.outcomes}


CLAW_INSTRUCTION = """Email boss@example.com with the subject `weekly report` through the local SMTP server
(its host:port is in /run/forge/mail); it is delivered to the Maildir /var/mail/boss.
Then add an event titled `review` starting 2026-12-01T10:00 to the calendar service
(its URL is in /run/forge/calendar): POST /events with a JSON body {"title": ..., "start": ...}.
"""
CLAW_TEST = """#!/bin/bash
r=$(python3 - <<'PY'
import json, mailbox, urllib.request
try:
    mail = any(m["Subject"] == "weekly report" for m in mailbox.Maildir("/var/mail/boss", create=False))
except mailbox.NoSuchMailboxError:
    mail = False
base = open("/run/forge/calendar").read().strip()
events = json.load(urllib.request.urlopen(base + "/events", timeout=10))
meeting = any(e.get("title") == "review" and e.get("start") == "2026-12-01T10:00" for e in events)
print(1 if mail and meeting else 0)
PY
)
echo "{\\"reward\\": ${r:-0}}" > /logs/verifier/reward.json
"""
CLAW_SOLVE = """#!/bin/bash
forge-services wait
python3 - <<'PY'
import json, smtplib, urllib.request
host, port = open("/run/forge/mail").read().strip().split(":")
with smtplib.SMTP(host, int(port), timeout=10) as smtp:
    smtp.sendmail("agent@example.com", ["boss@example.com"],
                  "From: agent@example.com\\r\\nSubject: weekly report\\r\\n\\r\\nAll done.\\r\\n")
base = open("/run/forge/calendar").read().strip()
body = json.dumps({"title": "review", "start": "2026-12-01T10:00"}).encode()
urllib.request.urlopen(urllib.request.Request(base + "/events", data=body, method="POST",
                                              headers={"Content-Type": "application/json"}), timeout=10)
PY
"""


def test_claw_task_with_mail_and_calendar_is_built_validated_published_and_pulled_back_by_digest(tmp_path: Path):
    import docker

    task = write(tmp_path / "tasks" / "mail-and-meeting", {
        "task.toml": '[task]\nname = "mail-and-meeting"\ndomain = "claw"\n[agent]\ntimeout_sec = 60\n'
                     '[environment]\ntemplate = "claw"\n[environment.template_params]\n'
                     f'services = ["mail", "calendar"]\nsetup = ["echo {uuid.uuid4().hex} > /etc/forge-test-run"]\n',
        "instruction.md": CLAW_INSTRUCTION, "tests/test.sh": CLAW_TEST, "solution/solve.sh": CLAW_SOLVE})
    report, outcomes = build(tmp_path, [task])
    outcome = outcomes["mail-and-meeting"]
    assert outcome.passed, outcome.reason
    assert outcome.rounds[0].nop_rewards == [0.0, 0.0] and outcome.rounds[0].oracle_rewards == [1.0, 1.0]
    assert outcome.builds == 1

    saved = tomllib.loads((task / "task.toml").read_text())
    pinned = saved["environment"]["docker_image"]
    assert pinned == outcome.image_digest and pinned.startswith("127.0.0.1:") and "@sha256:" in pinned
    assert saved["validation"]["passed"] is True and saved["validation"]["image_digest"] == pinned
    [entry] = read_manifest(tmp_path / "manifest.jsonl")
    assert entry["task"] == "mail-and-meeting" and entry["image"] == pinned and entry["validation"]["passed"]

    repo, digest = pinned.split("@")
    registry, name = repo.split("/", 1)
    manifest = httpx.get(f"http://{registry}/v2/{name}/manifests/{digest}", trust_env=False, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    assert manifest.status_code == 200 and manifest.headers["Docker-Content-Digest"] == digest
    client = docker.from_env()
    built_id = client.images.get(outcome.rounds[0].image).id
    assert client.images.pull(pinned).id == built_id

    # rollout reads the pin: the validated image runs the task again, no rebuild
    from openforgerl.rollout.orchestrator import RolloutConfig
    from openforgerl.rollout.run import run_rollouts

    _, results = asyncio.run(run_rollouts(RolloutConfig(tasks=[str(task)], harness="oracle",
                                                        run_dir=str(tmp_path / "rollout"))))
    assert [(r.status, r.reward) for r in results] == [("success", 1.0)]


def test_code_task_with_its_test_runner_is_built_and_validated(tmp_path: Path):
    task = write(tmp_path / "tasks" / "fix-add", {
        "task.toml": '[task]\nname = "fix-add"\ndomain = "code"\n[agent]\ntimeout_sec = 60\n'
                     '[environment]\ntemplate = "code"\n',
        "instruction.md": "The function add() in /app/calc.py returns the wrong result. Make it return the sum.\n",
        "environment/repo/calc.py": "def add(a, b):\n    return a - b\n",
        "environment/repo/README.md": "A tiny calculator.\n",
        "tests/test_calc.py": "import sys\nsys.path.insert(0, '/app')\nfrom calc import add\n\n\n"
                              "def test_add():\n    assert add(2, 3) == 5\n",
        "tests/test.sh": "#!/bin/bash\ncd /app\nif python3 -m pytest -q -p no:cacheprovider /tests/test_calc.py "
                         "> /logs/verifier/pytest.txt 2>&1; then r=1; else r=0; fi\n"
                         "echo \"{\\\"reward\\\": $r}\" > /logs/verifier/reward.json\n",
        "solution/solve.sh": "#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n"})
    _, outcomes = build(tmp_path, [task], push=False)
    outcome = outcomes["fix-add"]
    assert outcome.passed, outcome.reason
    assert outcome.rounds[0].nop_rewards == [0.0, 0.0] and outcome.rounds[0].oracle_rewards == [1.0, 1.0]
    assert "python3-pytest" in (task / "environment" / "Dockerfile").read_text()
    saved = tomllib.loads((task / "task.toml").read_text())
    assert saved["validation"]["passed"] is True and "docker_image" not in saved["environment"]


GUI_INDEX = """<!doctype html><html><body>
<form action="greet.html" method="get"><label>Name <input name="name"></label><button>Greet</button></form>
</body></html>
"""
GUI_GREET = """<!doctype html><html><body><h1 id="greeting">loading</h1>
<script>
const name = new URLSearchParams(location.search).get("name");
document.getElementById("greeting").textContent = name ? "Hello, " + name + "!" : "Who are you?";
</script></body></html>
"""
CHROMIUM = "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --dump-dom"
GUI_TEST = f"""#!/bin/bash
url=$(cat /run/forge-webapp/url)
r=0
if grep -q 'GET /greet.html?name=Ada ' /var/log/webapp/access.log 2>/dev/null; then
  # the app's page as a real browser renders it (the greeting is written by its JavaScript)
  {CHROMIUM} "${{url}}greet.html?name=Ada" > /logs/verifier/dom.html 2>/logs/verifier/chromium.log
  grep -q '<h1 id="greeting">Hello, Ada!</h1>' /logs/verifier/dom.html && r=1
fi
echo "{{\\"reward\\": $r}}" > /logs/verifier/reward.json
"""
GUI_SOLVE = f"""#!/bin/bash
url=$(forge-webapp)
{CHROMIUM} "${{url}}greet.html?name=Ada" > /dev/null 2>&1
"""


def test_gui_task_is_built_and_validated_with_a_real_browser(tmp_path: Path):
    task = write(tmp_path / "tasks" / "greet-ada", {
        "task.toml": '[task]\nname = "greet-ada"\ndomain = "gui"\n[agent]\ntimeout_sec = 120\n'
                     '[environment]\ntemplate = "gui"\n',
        "instruction.md": "Open the web app (its URL is in /run/forge-webapp/url) in the browser, type Ada into "
                          "the Name field and press Greet.\n",
        "environment/webapp/index.html": GUI_INDEX, "environment/webapp/greet.html": GUI_GREET,
        "tests/test.sh": GUI_TEST, "solution/solve.sh": GUI_SOLVE})
    _, outcomes = build(tmp_path, [task], push=False)
    outcome = outcomes["greet-ada"]
    assert outcome.passed, outcome.reason
    assert outcome.rounds[0].nop_rewards == [0.0, 0.0] and outcome.rounds[0].oracle_rewards == [1.0, 1.0]
    dom = next((tmp_path / "out" / "runs" / "greet-ada" / "round-0" / "oracle" / "logs").rglob("dom.html"))
    assert "Hello, Ada!" in dom.read_text()


def test_a_batch_reports_every_bad_task_with_its_reason_and_builds_the_shared_environment_once(tmp_path: Path):
    root, dockerfile = tmp_path / "tasks", unique_dockerfile()
    harbor = write(tmp_path / "harbor" / "harbor-hello", {
        "task.toml": 'version = "1.0"\n[metadata]\ncategory = "files"\n[agent]\ntimeout_sec = 60.0\n',
        "instruction.md": HELLO_INSTRUCTION, "environment/Dockerfile": dockerfile,
        "tests/test.sh": "#!/bin/bash\ngrep -qx hi /app/hello.txt && echo 1 > /logs/verifier/reward.txt "
                         "|| echo 0 > /logs/verifier/reward.txt\n", "solution/solve.sh": HELLO_SOLVE})
    imported = forge("tasks", "import-harbor", str(harbor.parent), "--out", str(root))
    assert imported.returncode == 0, imported.stderr
    hello_task(root, "always-passes", dockerfile,
               **{"tests/test.sh": "#!/bin/bash\necho '{\"reward\": 1}' > /logs/verifier/reward.json\n"})
    hello_task(root, "wrong-solution", dockerfile, **{"solution/solve.sh": "#!/bin/bash\necho bye > /app/hello.txt\n"})
    hello_task(root, "needs-sqlite", dockerfile, **{"tests/test.sh": HELLO_TEST.replace(
        "then r=1", "then r=$(sqlite3 :memory: 'select 1')")})
    hello_task(root, "unstated", dockerfile, **{"instruction.md": "Say hi.\n"})
    hello_task(root, "bad-toml", dockerfile, **{"task.toml": "[task\nname = 1\n"})
    public = hello_task(root, "public-image", dockerfile, **{
        "task.toml": '[task]\nname = "public-image"\n[environment]\ndocker_image = "docker.io/library/nosuch:1"\n'})
    (public / "environment" / "Dockerfile").unlink()

    result = forge("build-env", str(root), "--no-push", "--out-dir", str(tmp_path / "out"))
    assert result.returncode == 1
    report = json.loads((tmp_path / "out" / "build_report.json").read_text())
    outcomes = {Path(o["path"]).name: o for o in report["outcomes"]}
    assert outcomes["harbor-hello"]["passed"] is True
    assert outcomes["always-passes"]["stage"] == "baselines" and "nop check" in outcomes["always-passes"]["reason"]
    assert "passes without the task being done" in outcomes["always-passes"]["reason"]
    assert outcomes["wrong-solution"]["stage"] == "baselines" and "oracle check" in outcomes["wrong-solution"]["reason"]
    assert "[0, 0] < oracle_min 1" in outcomes["wrong-solution"]["reason"]
    assert outcomes["needs-sqlite"]["stage"] == "dependencies" and "sqlite3" in outcomes["needs-sqlite"]["reason"]
    assert outcomes["unstated"]["stage"] == "static" and "/app/hello.txt" in outcomes["unstated"]["reason"]
    assert outcomes["bad-toml"]["stage"] == "load" and "task.toml" in outcomes["bad-toml"]["reason"]
    assert outcomes["public-image"]["stage"] == "build" and "public registry" in outcomes["public-image"]["reason"]
    assert report["builds"] == 1  # every task that got to the build shares one environment
    assert "1 of 7 task(s) passed" in result.stderr and "oracle check" in result.stderr
    nop = tomllib.loads((root / "always-passes" / "task.toml").read_text())["validation"]
    assert nop["passed"] is False and nop["nop_rewards"] == [1.0, 1.0] and "nop check" in nop["reason"]


def test_a_task_with_a_compiled_verifier_spec_is_validated(tmp_path: Path):
    from openforgerl.verifiers import compile_verifier

    task = hello_task(tmp_path / "tasks", "spec-hello", unique_dockerfile())
    compile_verifier({"type": "file_regex", "path": "/app/hello.txt", "pattern": "^hi$", "fullmatch": True},
                     task / "tests", overwrite=True)
    _, outcomes = build(tmp_path, [task], push=False)
    outcome = outcomes["spec-hello"]
    assert outcome.passed, outcome.reason
    assert outcome.rounds[0].nop_rewards == [0.0, 0.0] and outcome.rounds[0].oracle_rewards == [1.0, 1.0]


def test_failure_cases_the_task_ships_must_score_0_and_a_verifier_that_rewards_one_fails(tmp_path: Path):
    # The verifier checks only that the file exists: "hello" instead of "hi" still passes it (a reward hack).
    lax = "#!/bin/bash\n[ -f /app/hello.txt ] && r=1 || r=0\necho \"{\\\"reward\\\": $r}\" > /logs/verifier/reward.json\n"
    failures = {"solution/failures/wrong_file.sh": "#!/bin/bash\necho hi > /app/goodbye.txt\n",
                "solution/failures/wrong_text.sh": "#!/bin/bash\necho hello > /app/hello.txt\n"}
    strict = hello_task(tmp_path / "tasks", "strict-hello", unique_dockerfile(), **failures)
    loose = hello_task(tmp_path / "tasks", "loose-hello", unique_dockerfile(), **failures, **{"tests/test.sh": lax})
    _, outcomes = build(tmp_path, [strict, loose], push=False, repeats=1)
    assert outcomes["strict-hello"].passed, outcomes["strict-hello"].reason
    assert outcomes["strict-hello"].rounds[0].failure_rewards == {"wrong_file": [0.0], "wrong_text": [0.0]}
    validation = tomllib.loads((strict / "task.toml").read_text())["validation"]
    assert validation["failure_rewards"] == {"wrong_file": [0.0], "wrong_text": [0.0]}
    loose_outcome = outcomes["loose-hello"]
    assert not loose_outcome.passed and loose_outcome.rounds[0].failure_rewards["wrong_text"] == [1.0]
    assert "failure wrong_text check" in loose_outcome.reason and "wrong_file" not in loose_outcome.reason


def test_validating_as_the_agent_user_catches_an_environment_only_root_can_work_in(tmp_path: Path):
    # the harness hands /app to the agent user; /srv/out stays root's
    root_only = unique_dockerfile() + "RUN mkdir -p /srv/out && chmod 0755 /srv/out\n"
    task = hello_task(tmp_path / "tasks", "root-only", root_only, **{
        "instruction.md": "Create /srv/out/hello.txt containing hi.\n",
        "tests/test.sh": HELLO_TEST.replace("/app/hello.txt", "/srv/out/hello.txt"),
        "solution/solve.sh": "#!/bin/bash\necho hi > /srv/out/hello.txt\n"})
    _, as_root = build(tmp_path / "root", [task], push=False, agent_user="root")
    assert as_root["root-only"].passed, as_root["root-only"].reason
    _, as_agent = build(tmp_path / "agent", [task], push=False)  # our tasks' agents are unprivileged by default
    assert not as_agent["root-only"].passed and "oracle check" in as_agent["root-only"].reason


def test_a_check_made_a_warning_is_recorded_without_failing_the_task(tmp_path: Path):
    task = hello_task(tmp_path / "tasks", "docs-only", unique_dockerfile(),
                      **{"instruction.md": "Follow the greeting contract in the docs.\n"})
    result = forge("build-env", str(task), "--no-push", "--warn-only", "instruction",
                   "--out-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    validation = tomllib.loads((task / "task.toml").read_text())["validation"]
    assert validation["passed"] is True and "/app/hello.txt" in validation["warnings"][0]


def test_a_verifier_whose_repeats_disagree_fails_as_flaky(tmp_path: Path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = iter(["1", "0"] * 10)

    class Coin(BaseHTTPRequestHandler):  # an outside dependency that answers differently each time
        def do_GET(self) -> None:
            body = next(answers).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Coin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    coin = f"curl -s http://127.0.0.1:{server.server_address[1]}/"
    task = hello_task(tmp_path / "tasks", "coin-flip", unique_dockerfile(), **{
        "tests/test.sh": HELLO_TEST.replace("then r=1", f"then r=$({coin})")})
    try:  # the coin answers on this host's loopback: only host networking reaches it (an explicit opt-in)
        _, outcomes = build(tmp_path, [task], push=False, network="host")
    finally:
        server.shutdown()
    outcome = outcomes["coin-flip"]
    assert not outcome.passed and outcome.stage == "baselines"
    assert "oracle check: flaky" in outcome.reason and "across 2 repeats" in outcome.reason
    assert "[1, 0]" in outcome.reason or "[0, 1]" in outcome.reason


def test_the_scripted_repair_model_fixes_a_broken_task_within_two_rounds(tmp_path: Path):
    task = hello_task(tmp_path / "tasks", "needs-repair", unique_dockerfile(),
                      **{"solution/solve.sh": "#!/bin/bash\necho bye > /app/hello.txt\n"})
    not_yet = {"explanation": "capitalise", "edits": [{"path": "solution/solve.sh",
                                                       "content": "#!/bin/bash\necho Hi > /app/hello.txt\n"}]}
    fix = {"explanation": "solve.sh wrote the wrong word", "edits": [{"path": "solution/solve.sh",
                                                                     "content": HELLO_SOLVE}]}
    replies = [json.dumps(not_yet), "```json\n" + json.dumps(fix) + "\n```"]
    with ScriptedChatServer(replies, after_last="repeat", model="scripted-repairer") as model:
        result = forge("build-env", str(task), "--no-push", "--repair-model", model.base_url, "--rounds", "2",
                       "--out-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    [outcome] = json.loads((tmp_path / "out" / "build_report.json").read_text())["outcomes"]
    rounds = outcome["rounds"]
    assert [r["passed"] for r in rounds] == [False, False, True]
    assert all("oracle check" in r["reason"] for r in rounds[:2])
    assert [r["repair"]["explanation"] for r in rounds[:2]] == ["capitalise", "solve.sh wrote the wrong word"]
    assert (task / "solution" / "solve.sh").read_text() == HELLO_SOLVE
    assert tomllib.loads((task / "task.toml").read_text())["validation"]["rounds"] == 2
    first, second = (r["messages"][1]["content"] for r in model.requests)
    assert "oracle check" in first and "echo bye" in first
    assert "Earlier repair rounds" in second and "capitalise" in second
