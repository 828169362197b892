"""Test-suite check: pytest (or any JUnit-writing command) run by the verifier, scored from its report."""

from __future__ import annotations

import pytest

TESTS = """
from calc import add, sub

def test_add():
    assert add(2, 3) == 5

def test_sub():
    assert sub(5, 3) == 2

def test_add_negative():
    assert add(-1, -1) == -2
"""
RIGHT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
HALF_RIGHT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return b - a\n"


@pytest.fixture
def repo(box):
    box.write("/tests/test_calc.py", TESTS)
    return box


def suite(**overrides):
    return {"type": "test_suite", "args": ["/tests/test_calc.py", "-p", "no:randomly"], "cwd": "/app",
            **overrides}


def with_app_on_path(box):
    # In a task: PYTHONPATH = "/app" in task.toml's [verifier] env.
    return {"PYTHONPATH": str(box.path("/app"))}


def test_all_passing_scores_1_with_counts(repo):
    repo.write("/app/calc.py", RIGHT)
    verdict = repo.verify(suite(), env=with_app_on_path(repo))
    assert verdict.reward == 1.0, verdict.metrics
    assert (verdict.metrics["total"], verdict.metrics["passed"], verdict.metrics["fraction_passed"]) == (3, 3, 1.0)


def test_one_failure_scores_0_or_the_fraction(repo):
    repo.write("/app/calc.py", HALF_RIGHT)
    verdict = repo.verify(suite(), env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and verdict.metrics["failed"] == 1
    verdict = repo.verify(suite(scoring="fraction"), env=with_app_on_path(repo))
    assert verdict.reward == pytest.approx(2 / 3)


def test_missing_module_is_collection_errors_not_a_pass(repo):
    verdict = repo.verify(suite(), env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and verdict.metrics["exit_code"] != 0


def test_a_planted_junit_report_never_counts(repo):
    planted = '<testsuite><testcase name="a"/><testcase name="b"/></testsuite>'
    repo.write("/app/report.xml", planted)
    spec = suite(framework="junit", command="exit 0", junit_xml="/app/report.xml")
    verdict = repo.verify(spec)
    assert verdict.reward == 0.0 and "no JUnit XML" in verdict.metrics["error"]


def test_junit_command_report_is_parsed_from_testcases(repo):
    report = ('<testsuites><testsuite tests="99" failures="0">'
              '<testcase name="a"/><testcase name="b"><failure message="x"/></testcase>'
              '<testcase name="c"><skipped/></testcase><testcase name="d"><error/></testcase>'
              '</testsuite></testsuites>')
    repo.write("/tests/report.xml.in", report)
    spec = suite(framework="junit", command='cp "$FORGE_ROOT/tests/report.xml.in" "$FORGE_ROOT/app/out.xml"',
                 junit_xml="/app/out.xml", scoring="fraction")
    verdict = repo.verify(spec)
    counts = {k: verdict.metrics[k] for k in ("total", "passed", "failed", "skipped", "errors")}
    assert counts == {"total": 4, "passed": 1, "failed": 1, "skipped": 1, "errors": 1}
    assert verdict.reward == 0.25


def test_truncated_report_fails_with_the_parse_error(repo):
    spec = suite(framework="junit", junit_xml="/app/out.xml",
                 command='printf "<testsuite><testcase name=a>" > "$FORGE_ROOT/app/out.xml"')
    verdict = repo.verify(spec)
    assert verdict.reward == 0.0 and "not valid XML" in verdict.metrics["error"]


def test_deleted_tests_fail_expect_total(repo):
    repo.write("/app/calc.py", RIGHT)
    spec = suite(args=["/tests/test_calc.py", "-k", "add"], expect_total=3)
    verdict = repo.verify(spec, env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and "2 tests ran, expected 3" in verdict.metrics["error"]


def test_zero_tests_is_a_failure(repo):
    repo.write("/app/calc.py", RIGHT)
    verdict = repo.verify(suite(args=["/tests/test_calc.py", "-k", "nothing_matches"]), env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and "no tests ran" in verdict.metrics["error"], verdict.metrics


def test_skipped_tests_are_not_passes(repo):
    repo.write("/tests/test_skip.py", "import pytest\n\ndef test_x():\n    pytest.skip('later')\n")
    verdict = repo.verify(suite(args=["/tests/test_skip.py"], scoring="fraction"))
    assert verdict.reward == 0.0 and verdict.metrics["skipped"] == 1


FAKE_PYTEST = """import sys
report = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml=")][0]
open(report, "w").write('<testsuite><testcase name="a"/><testcase name="b"/><testcase name="c"/></testsuite>')
sys.exit(0)
"""
FORCE_PASS = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""


def test_a_pytest_module_planted_in_the_repo_is_not_the_one_that_runs(repo):
    repo.write("/app/calc.py", HALF_RIGHT)
    repo.write("/app/pytest.py", FAKE_PYTEST)
    repo.write("/app/pluggy.py", "raise SystemExit(0)\n")
    verdict = repo.verify(suite(), env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and verdict.metrics["failed"] == 1


def test_config_and_conftest_planted_above_the_tests_are_ignored(repo):
    repo.write("/app/calc.py", HALF_RIGHT)
    repo.write("/conftest.py", FORCE_PASS)
    repo.write("/pytest.ini", "[pytest]\naddopts = -p forcepass\n")
    repo.write("/app/forcepass.py", FORCE_PASS)
    verdict = repo.verify(suite(), env=with_app_on_path(repo))
    assert verdict.reward == 0.0 and verdict.metrics["failed"] == 1


def test_the_tests_own_conftest_and_ini_are_used_when_named(repo):
    repo.write("/app/calc.py", RIGHT)
    repo.write("/tests/conftest.py", "import pytest\n\n@pytest.fixture\ndef three():\n    return 3\n")
    repo.write("/tests/test_fixture.py", "def test_uses_fixture(three):\n    assert three == 3\n")
    repo.write("/tests/pytest.ini", "[pytest]\nmarkers =\n    slow: slow tests\n")
    spec = suite(args=["/tests/test_calc.py", "/tests/test_fixture.py", "--strict-markers"], ini="/tests/pytest.ini")
    verdict = repo.verify(spec)
    assert verdict.reward == 1.0 and verdict.metrics["total"] == 4, verdict.metrics
