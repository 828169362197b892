"""Test-suite check for forge_verify: run pytest (or any command writing JUnit XML) and score it.

Invariant: the report is one this run wrote — pytest writes into a fresh private temp dir, and
for ``framework: junit`` the report path is deleted before the command runs — so a report the
agent planted never counts. Skipped tests are not passed tests; zero tests is a failure.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from forge_state import run_shell


def check_test_suite(spec: dict, ctx) -> tuple[float, dict]:
    if spec.get("framework", "pytest") == "pytest":
        report_dir = Path(tempfile.mkdtemp(prefix="forge-junit-"))
        report = report_dir / "report.xml"
        command = _pytest_command(spec, report, ctx)
    else:
        report_dir, report = None, ctx.path(spec["junit_xml"])
        _remove(report)
        command = spec["command"]
    try:
        exit_code, output = run_shell(command, ctx.path(spec.get("cwd", "/app")), spec.get("timeout_sec", 600), ctx)
        return _score(spec, exit_code, output, report)
    finally:
        if report_dir is not None:
            shutil.rmtree(report_dir, ignore_errors=True)


# pytest (and what it imports at start-up) comes from site-packages before the task's own paths
# join sys.path, so a pytest.py or pluggy.py the agent left in /app or on PYTHONPATH is never run.
BOOTSTRAP = (
    "import os, sys; import pytest; "
    "sys.path[0:0] = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p] + [os.getcwd()]; "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def _pytest_command(spec: dict, report: Path, ctx) -> str:
    mapped = [str(ctx.path(a)) if a.startswith("/") else a for a in spec.get("args", ["/tests"])]
    ini = ctx.path(spec["ini"]) if spec.get("ini") else report.parent / "pytest.ini"
    if not spec.get("ini"):
        ini.write_text("[pytest]\n")
    # -I: no PYTHONPATH or script dir at start-up (BOOTSTRAP adds them after pytest is imported).
    # -p no:cacheprovider: no .pytest_cache written into the agent's tree (or read from it).
    confcutdir = str(ctx.path(spec.get("confcutdir", "/tests")))
    parts = [sys.executable, "-I", "-c", BOOTSTRAP, "-c", str(ini), "--rootdir", confcutdir, "--confcutdir", confcutdir,
             "-p", "no:cacheprovider", "-q", *mapped, f"--junitxml={report}"]
    return " ".join(_quote(p) for p in parts)


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\"'\"'") + "'"


def _remove(report: Path) -> None:
    if report.is_symlink() or report.is_file():
        report.unlink()
    elif report.exists():
        shutil.rmtree(report)


def _score(spec: dict, exit_code: int | None, output: str, report: Path) -> tuple[float, dict]:
    details: dict = {"exit_code": exit_code, "output_tail": output}
    if exit_code is None:
        details["error"] = f"suite timed out after {spec.get('timeout_sec', 600)} s"
        return 0.0, details
    if not report.is_file():
        details["error"] = "the suite wrote no JUnit XML report"
        return 0.0, details
    counts = parse_junit(report)
    details.update(counts)
    total, passed = counts["total"], counts["passed"]
    if total == 0:
        details["error"] = "no tests ran"
        return 0.0, details
    expected = spec.get("expect_total")
    if expected is not None and total != expected:
        details["error"] = f"{total} tests ran, expected {expected}"
        return 0.0, details
    details["fraction_passed"] = round(passed / total, 6)
    all_passed = passed == total and exit_code == 0
    if spec.get("scoring", "all") == "fraction":
        return passed / total, details
    return (1.0 if all_passed else 0.0), details


def parse_junit(report: Path) -> dict:
    """Counts from the <testcase> elements themselves (not the suite's summary attributes)."""
    try:
        root = ElementTree.parse(report).getroot()
    except ElementTree.ParseError as exc:
        raise ValueError(f"JUnit report is not valid XML: {exc}") from None
    counts = {"total": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in root.iter("testcase"):
        counts["total"] += 1
        tags = {child.tag for child in case}
        if "failure" in tags:
            counts["failed"] += 1
        elif "error" in tags:
            counts["errors"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts
