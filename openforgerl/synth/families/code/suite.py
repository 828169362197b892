"""Running a repository's own test suite on this host, before and after a change (SWE-smith's gather step).

``outcomes(app_dir, overrides)`` copies the repository, writes the changed files over it, runs pytest
and returns each test's outcome; ``validate`` compares that with the untouched repository: the tests
that go from passing to failing (F2P) and those that keep passing (P2P).

Invariant: a run depends only on the repository's files and the changes (fixed hash seed, no plugins,
no bytecode or cache written), so its result is memoised for the process and the same change always
gives the same outcomes, failure messages included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from openforgerl.errors import UserError

SUITE_TIMEOUT_S = 60.0
"""A repository's whole suite runs in about a second; past this the run is stopped (a hang outside a test)."""
TEST_CPU_LIMIT_S = 2.0
"""One test may use this much CPU time (not wall time, so a busy machine changes nothing) before the
hang guard stops it: an injected infinite loop fails its test instead of stalling the run."""
HANG_GUARD = "forge_hang_guard"
HANG_GUARD_SOURCE = f'''"""pytest plugin: a test that burns {TEST_CPU_LIMIT_S} s of CPU is stopped as hanging."""
import signal

import pytest


class ForgeHangGuard(Exception):
    pass


def _stop(signum, frame):
    raise ForgeHangGuard("the test used {TEST_CPU_LIMIT_S} s of CPU time")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    previous = signal.signal(signal.SIGPROF, _stop)
    signal.setitimer(signal.ITIMER_PROF, {TEST_CPU_LIMIT_S})
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
'''
MAX_F2P_SHARE = 0.5
"""A change that breaks more than this share of the tests breaks everything, not one behaviour."""
QUIET_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class Outcome:
    passed: bool
    message: str = ""
    """What pytest printed about the failure (its ``E`` lines), empty for a pass."""


@dataclass
class Validation:
    """A change judged against the untouched repository's suite."""

    total: int
    f2p: list[str] = field(default_factory=list)
    """Test ids that pass before the change and fail after it, in suite order."""
    p2p: list[str] = field(default_factory=list)
    timed_out: bool = False
    messages: dict[str, str] = field(default_factory=dict)

    def problem(self) -> str | None:
        """Why the change is no bug to fix (one sentence), or None when it is one."""
        if self.timed_out:
            return "the change makes the code loop for ever (a test ran past its CPU limit, or the suite stalled)"
        if not self.f2p:
            return "no test fails after the change (it does not alter tested behaviour)"
        if not self.p2p:
            return "no test passes after the change (it breaks everything)"
        if len(self.f2p) > MAX_F2P_SHARE * self.total:
            return (f"{len(self.f2p)} of {self.total} tests fail after the change, more than "
                    f"{MAX_F2P_SHARE:.0%} (it breaks too much to be one behaviour)")
        return None


def test_module(test_id: str) -> tuple[str, str]:
    """``tests/test_slug.py::test_basic`` -> (``tests/test_slug.py``, ``test_basic``), parameters dropped."""
    path, _, name = test_id.partition("::")
    return path, name.split("[", 1)[0]


def outcomes(app_dir: Path, overrides: Mapping[str, str] | None = None) -> dict[str, Outcome] | None:
    """Each test's outcome in ``app_dir`` with ``overrides`` (relative path -> text) written over it;
    None when the suite ran past ``SUITE_TIMEOUT_S``."""
    return _outcomes(str(app_dir), tuple(sorted((overrides or {}).items())))


@lru_cache(maxsize=2048)
def _outcomes(app_dir: str, overrides: tuple[tuple[str, str], ...]) -> dict[str, Outcome] | None:
    with tempfile.TemporaryDirectory(prefix="forge-synth-suite-") as tmp:
        repo = Path(tmp) / "app"
        shutil.copytree(app_dir, repo, ignore=shutil.ignore_patterns("__pycache__", ".git", ".pytest_cache"))
        for relative, text in overrides:
            (repo / relative).write_text(text, encoding="utf-8")
        report = Path(tmp) / "report.xml"
        (Path(tmp) / f"{HANG_GUARD}.py").write_text(HANG_GUARD_SOURCE)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", HANG_GUARD,
                   "--rootdir", str(repo), "-c", os.devnull, f"--junitxml={report}", "tests"]
        env = {**os.environ, **QUIET_ENV, "PYTHONPATH": tmp}
        try:
            done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
        if not report.is_file():
            if "No module named pytest" in done.stderr:
                raise UserError(f"{sys.executable} cannot import pytest, which code tasks are validated with",
                                fix="pip install pytest into the environment forge runs in")
            raise UserError(f"pytest wrote no report for {app_dir}: {(done.stdout + done.stderr)[-300:]}",
                            fix="check that the repository's tests run with python3 -m pytest tests")
        return parse_report(report, str(repo))


def parse_report(report: Path, repo: str) -> dict[str, Outcome]:
    """Test id (``tests/test_x.py::name``) -> outcome, from a JUnit XML report, in suite order."""
    found: dict[str, Outcome] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        names = [part for part in module if not part[:1].isupper()]
        owner = ".".join(part for part in module if part[:1].isupper())
        test_id = "/".join(names) + ".py::" + (f"{owner}." if owner else "") + case.get("name", "")
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        skipped = any(c.tag == "skipped" for c in case)
        if problem is None and not skipped:
            found[test_id] = Outcome(True)
        else:
            found[test_id] = Outcome(False, _message(problem, repo) if problem is not None else "skipped")
    return found


def _message(element: ElementTree.Element, repo: str) -> str:
    """pytest's first ``E`` line (the assertion with actual and expected, or the exception) and its
    ``where`` lines; pytest's character diff is left out."""
    text = element.text or ""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ") and line[1:].strip()]
    kept = lines[:1] + [line for line in lines[1:] if line.startswith(("where", "+  where", "+ where"))][:4]
    message = "\n".join(kept) or "\n".join((element.get("message") or "failed").strip().splitlines()[:1])
    return ADDRESS.sub("", message.replace(repo, "/app"))


def validate(app_dir: Path, overrides: Mapping[str, str]) -> Validation:
    """The change ``overrides`` judged against the untouched suite (F2P, P2P, timeout)."""
    before = outcomes(app_dir)
    if before is None or not all(outcome.passed for outcome in before.values()):
        failing = sorted(t for t, o in (before or {}).items() if not o.passed)
        raise UserError(f"the tests of {app_dir} do not all pass on this host (failing: {failing[:3]})",
                        fix="make the repository's suite pass before synthesising tasks from it")
    after = outcomes(app_dir, overrides)
    if after is None or any("ForgeHangGuard" in outcome.message for outcome in after.values()):
        return Validation(total=len(before), timed_out=True)
    f2p = [t for t in before if t not in after or not after[t].passed]
    p2p = [t for t in before if t in after and after[t].passed]
    return Validation(total=len(before), f2p=f2p, p2p=p2p,
                      messages={t: after[t].message for t in f2p if t in after})
