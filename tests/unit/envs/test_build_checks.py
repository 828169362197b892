"""Static quality checks: each names the file, the evidence and the fix."""

from __future__ import annotations

from openforgerl.envs.checks import (checked_paths, dependency_probe, invoked_commands, python_modules,
                                           static_checks)
from openforgerl.tasks import Task

VERIFIER = """#!/bin/bash
mkdir -p /logs/verifier
cd /app
if [ "$(cat /app/out/report.txt 2>/dev/null)" = done ] && jq -e '.ok' /app/state.json >/dev/null; then r=1; else r=0; fi
python3 -m pytest -q /tests/test_more.py > /logs/verifier/pytest.txt || r=0
cat > /tmp/note <<'END'
notacommand here; another one
END
check() { grep -q x /app/state.json; }
check || r=0
echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
"""


def test_paths_the_verifier_reads_exclude_its_own_and_system_files():
    assert checked_paths(VERIFIER) == ["/app/out/report.txt", "/app/state.json"]


def test_commands_the_verifier_runs_skip_builtins_functions_heredocs_and_strings():
    assert sorted(invoked_commands(VERIFIER)) == ["cat", "grep", "jq", "mkdir", "python3"]
    assert python_modules(VERIFIER) == ["pytest"]
    probe = dependency_probe(["jq"], ["pytest"])[2]
    assert "command -v jq" in probe and "import pytest" in probe


def test_a_program_quoted_over_several_lines_is_one_command():
    script = "#!/bin/bash\n# don't run this by hand\npython3 -I -c '\nimport json\nfor row in rows:\n    total += 1\n' /app/a\n" \
             'grep -c "done\nsummary" /app/a > /logs/verifier/out\n'
    assert sorted(invoked_commands(script)) == ["grep", "python3"]  # not import, for, total


def test_a_sound_task_has_no_findings(make_task):
    task = Task.load(make_task(instruction="Write hi into /app/hello.txt.\n"))
    assert static_checks(task) == []


def test_instruction_that_never_names_the_checked_file_is_reported(make_task):
    task_dir = make_task(instruction="Say hello.\n")
    [finding] = static_checks(Task.load(task_dir))
    assert finding.check == "instruction" and "/app/hello.txt" in finding.what and "instruction.md" in finding.fix


def test_naming_the_file_relative_to_the_workdir_is_enough(make_task):
    assert static_checks(Task.load(make_task(instruction="Create hello.txt (in /app) containing hi.\n"))) == []


def test_a_state_store_of_the_environment_need_not_be_named(make_task):
    from openforgerl.verifiers import compile_verifier

    task_dir = make_task(instruction="Add the item 'milk' to the list in the web app.\n")
    compile_verifier({"type": "sqlite", "database": "/var/lib/webapp/app.db", "query": "select 1",
                      "expect_rows": [[1]]}, task_dir / "tests", overwrite=True)
    [finding] = static_checks(Task.load(task_dir))
    assert "/var/lib/webapp/app.db" in finding.what
    task = Task.load(task_dir)
    task.config.environment.state_stores = ["/var/lib/webapp"]
    task.save()
    assert static_checks(Task.load(task_dir)) == []


def test_tests_or_solution_copied_into_the_image_are_reported(make_task):
    task_dir = make_task(instruction="Write hi into /app/hello.txt.\n")
    (task_dir / "environment" / "Dockerfile").write_text("FROM openforgerl/base:bookworm\nCOPY tests/ /tests/\n")
    (task_dir / "environment" / "hint.sh").write_bytes((task_dir / "solution" / "solve.sh").read_bytes())
    findings = static_checks(Task.load(task_dir))
    assert [f.check for f in findings] == ["visibility", "visibility"]
    assert "line 2" in findings[0].what and "solution/solve.sh" in findings[1].what


def test_solution_that_writes_the_reward_or_reads_the_tests_is_reported(make_task):
    task_dir = make_task(instruction="Write hi into /app/hello.txt.\n")
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\ncp /tests/expected.txt /app/hello.txt\n"
                                                    "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n")
    checks = [f.check for f in static_checks(Task.load(task_dir))]
    assert checks == ["hardcoded", "hardcoded"]


def test_solution_pasting_an_expected_output_file_is_reported(make_task):
    task_dir = make_task(instruction="Write the summary into /app/hello.txt.\n")
    expected = "total=42 mean=7.0 max=12 min=1 (from data.csv)"
    (task_dir / "tests" / "expected.txt").write_text(expected + "\n")
    (task_dir / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho '{expected}' > /app/hello.txt\n")
    [finding] = static_checks(Task.load(task_dir))
    assert finding.check == "hardcoded" and "tests/expected.txt" in finding.what


def test_url_paths_closing_tags_and_environment_records_are_not_checked_files():
    script = ("grep -q 'GET /greet.html?name=Ada ' /var/log/webapp/access.log\n"
              "grep -q '<h1>Hi</h1>' /app/page/out.html\ncurl -s http://127.0.0.1:8000/api/items\n"
              "cat /run/forge-webapp/url\n")
    assert checked_paths(script) == ["/app/page/out.html"]


def test_a_verifier_that_installs_its_own_tools_is_checked_up_to_the_install():
    harbor = ("#!/bin/bash\nmkdir -p /logs/verifier\napt-get update\napt-get install -y curl\n"
              "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\n"
              "uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py\n")
    assert invoked_commands(harbor) == ["mkdir", "apt-get"]


SPEC = {"type": "all", "checks": [
    {"type": "json_path", "name": "receipt", "path": "/app/receipt.json", "json_path": "$.qty", "equals": 3},
    {"type": "command", "name": "db", "command": "sqlite3 /app/shop.db 'select 1'"},
    {"type": "test_suite", "args": ["/tests/test_shop.py"]}]}


def test_a_compiled_verifiers_paths_and_needs_come_from_its_spec(make_task):
    from openforgerl.envs.checks import spec_requirements
    from openforgerl.verifiers import compile_verifier

    task_dir = make_task(instruction="Record the order in /app/receipt.json.\n")
    compile_verifier(SPEC, task_dir / "tests", overwrite=True)
    (task_dir / "tests" / "test_shop.py").write_text("def test_db():\n    assert open('/app/shop.db')\n")
    [finding] = static_checks(Task.load(task_dir))
    assert finding.check == "instruction" and "/app/shop.db" in finding.what and "receipt" not in finding.what
    commands, modules = spec_requirements(Task.load(task_dir))
    assert {"python3", "bash", "sqlite3"} <= set(commands) and modules == ["pytest"]


def test_programs_and_scripts_the_verifier_runs_are_its_tools_not_checked_files():
    script = ("bash /app/scripts/rebuild.sh && /opt/venv/bin/python -m pytest /tests/test_outputs.py\n"
              "python3 /srv/tools/compare.py /app/output/atlas.json\n")
    assert checked_paths(script) == ["/app/output/atlas.json"]
