import subprocess
import sys


def forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True, timeout=120)


def test_tasks_validate_prints_problems_and_exits_1(make_task):
    good = make_task("good")
    bad = make_task("bad", '[task]\ndomain = "web"\n')
    result = forge("tasks", "validate", str(good), str(bad))
    assert result.returncode == 1
    assert "task.domain" in result.stdout and "gui, claw, code" in result.stdout
    assert "1 of 2 task(s) valid" in result.stderr
    assert forge("tasks", "validate", str(good)).returncode == 0


def test_help_lists_the_commands():
    out = forge("--help")
    assert out.returncode == 0
    for command in ("tasks",):
        assert command in out.stdout
