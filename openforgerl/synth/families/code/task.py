"""What every code task is made of: a change to a repository (an injected bug, a removed body), the hidden
copy of its test suite that judges the agent's work, the reverse patch that undoes the change, and the
host dry run that checks all of it.

The image holds the changed repository at /app (the changed module, and test modules without the tests
the change breaks: ``TaskDraft.files`` writes them over the asset's shared ``environment/repo``). The
verifier runs the repository's *whole original* suite from ``/tests/hidden`` with ``expect_total`` set.

Invariant: the change is a bug to fix (F2P >= 1, P2P >= 1, F2P <= half the suite, no hang), and under the
same compiled verifier the container runs, the changed repository (nop) scores 0, the reverse patch
(oracle) 1, and tampering with the tests, a constant answer, collateral damage and a partial job 0.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from openforgerl.synth.families.code.mutations import Source, functions, replace_body, strip_tests, test_snippet
from openforgerl.synth.families.code.suite import QUIET_ENV, Validation, test_module, validate
from openforgerl.synth.family import Difficulty, Effect, TaskDraft
from openforgerl.verifiers import run_compiled

APP = "/app"
HIDDEN = "tests/hidden"
ENV_REPO = "environment/repo"
SUITE_TIMEOUT_SEC = 300
DRY_RUN_WORKERS = 2
EXAMPLES = 2
HIDDEN_HEADER = ("# {name} of the repository as the task started, with every test; the verifier runs this copy,\n"
                 "# so what the agent does to the repository's own tests does not change the verdict.\n")
PLANTED_CONFTEST = """import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.skip(reason="planted"))
"""
PLANTED_PYTEST = "import sys\n\n\ndef main(*args, **kwargs):\n    return 0\n\n\nsys.exit(0)\n"
NEEDED_ACTIONS = ["read", "search", "write", "test"]


@dataclass(frozen=True)
class Repo:
    """The asset's repository as the image starts with it (``<state>/app``)."""

    app: Path
    package: str
    modules: tuple[str, ...]
    """The package's modules with code, relative to the repository (``textkit/slug.py``)."""
    tests: tuple[str, ...]

    def text(self, relative: str) -> str:
        return _read(self.app / relative)


@lru_cache(maxsize=64)
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@lru_cache(maxsize=64)
def repo_at(state: Path) -> Repo:
    """The repository of a code asset's materialised state."""
    app = state / APP.lstrip("/")
    packages = sorted(p.parent.name for p in app.glob("*/__init__.py") if p.parent.name != "tests")
    if len(packages) != 1:
        raise ValueError(f"a code asset's repository holds one package; {app} has {packages or 'none'}")
    package = packages[0]
    modules = tuple(sorted(str(p.relative_to(app)) for p in (app / package).glob("*.py")
                           if functions(Source(p.read_text(encoding="utf-8")), 1)))
    tests = tuple(sorted(str(p.relative_to(app)) for p in (app / "tests").glob("test_*.py")))
    return Repo(app, package, modules, tests)


@dataclass
class Change:
    """A changed module of the repository and what its suite says about it."""

    module: str
    original: str
    changed: str
    targets: list[str]
    """The functions the change is in (qualified names)."""
    validation: Validation


def make_change(repo: Repo, module: str, changed: str, targets: list[str]) -> Change:
    return Change(module, repo.text(module), changed, targets, validate(repo.app, {module: changed}))


@dataclass
class Wording:
    """The parts of a task's text that depend on the family."""

    title: str
    opening: str
    examples_intro: str
    literals: list[str] = field(default_factory=list)
    difficulty: Difficulty = "medium"


def examples(repo: Repo, validation: Validation, chosen: list[str] | None = None) -> str:
    """Failing checks as an issue would show them: the code (from the hidden tests, without their names)
    and what pytest said (actual vs expected)."""
    blocks = []
    for test_id in (chosen or representative(validation))[:EXAMPLES]:
        path, name = test_module(test_id)
        snippet = test_snippet(repo.text(path), name)
        message = validation.messages.get(test_id, "")
        code = f"```python\n{snippet}\n```\n\n" if snippet else ""
        blocks.append(f"{code}pytest reports:\n\n```\n{message}\n```")
    return "\n\n".join(blocks)


def representative(validation: Validation) -> list[str]:
    """Failing tests whose messages differ, those comparing actual and expected values first."""
    ranked = sorted(validation.f2p, key=lambda t: not validation.messages.get(t, "").startswith("AssertionError"))
    distinct: dict[str, str] = {}
    for test_id in ranked:
        distinct.setdefault(validation.messages.get(test_id, ""), test_id)
    return list(distinct.values())


def first_message(validation: Validation, chosen: list[str] | None = None) -> str:
    return (validation.messages.get((chosen or representative(validation))[0], "").splitlines() or [""])[0]


def instruction(repo: Repo, change: Change, wording: Wording, chosen: list[str] | None = None) -> str:
    total = change.validation.total
    more = len(change.validation.f2p) - min(EXAMPLES, len(chosen or representative(change.validation)))
    extra = f"\n\n{more} more check{'s' if more != 1 else ''} of the test suite fail{'' if more != 1 else 's'} " \
            "as well." if more > 0 else ""
    return (f"{wording.opening}\n\n{wording.examples_intro}\n\n{examples(repo, change.validation, chosen)}{extra}\n\n"
            f"Change only the library code under {APP}/{repo.package}, and keep the tests as they are: the "
            f"repository's full test suite ({total} tests, some of them kept out of {APP}/tests) must pass "
            f"afterwards. `cd {APP} && python3 -m pytest -q tests` runs the visible ones.\n")


def reverse_patch(change: Change) -> str:
    """A unified diff taking the changed module back to the original (for ``git apply``)."""
    lines = difflib.unified_diff(change.changed.splitlines(keepends=True), change.original.splitlines(keepends=True),
                                 fromfile=f"a/{change.module}", tofile=f"b/{change.module}")
    return "".join(lines)


def solution(change: Change) -> str:
    return (f"# Undo the change: the reverse patch of {change.module}.\ncd {APP}\n"
            f"git apply <<'FORGE_PATCH'\n{reverse_patch(change)}FORGE_PATCH\n")


def task_files(repo: Repo, change: Change) -> dict[str, str]:
    """The changed module and the visible tests without the failing ones (into the image), and the hidden
    suite (into tests/)."""
    broken: dict[str, set[str]] = {}
    for test_id in change.validation.f2p:
        path, name = test_module(test_id)
        broken.setdefault(path, set()).add(name)
    files = {f"{ENV_REPO}/{change.module}": change.changed}
    for path, names in sorted(broken.items()):
        files[f"{ENV_REPO}/{path}"] = strip_tests(repo.text(path), names)
    for path in repo.tests:
        name = Path(path).name
        files[f"{HIDDEN}/{name}"] = HIDDEN_HEADER.format(name=path) + repo.text(path)
    return files


def spec(change: Change) -> dict[str, Any]:
    return {"type": "test_suite", "name": "repository_tests", "args": [f"/{HIDDEN}"], "cwd": APP,
            "expect_total": change.validation.total, "scoring": "all", "timeout_sec": SUITE_TIMEOUT_SEC}


def collateral_target(repo: Repo, change: Change) -> tuple[str, str] | None:
    """(module, function) of another function the tests call: breaking it while fixing is collateral damage."""
    tests_text = "".join(repo.text(t) for t in repo.tests)
    ordered = [change.module, *(m for m in repo.modules if m != change.module)]
    for module in ordered:
        for function in functions(Source(repo.text(module)), 1):
            name = function.qualname.split(".")[-1]
            if function.qualname in change.targets or name.startswith("_"):
                continue
            if re.search(rf"(?<![\w]){re.escape(name)}\(", tests_text):
                return module, function.qualname
    return None


def write_module(module: str, text: str) -> Effect:
    def effect(root: Path) -> None:
        (root / APP.lstrip("/") / module).write_text(text, encoding="utf-8")
    return effect


def tamper_tests(root: Path) -> None:
    """Delete the visible tests and plant a conftest.py that skips everything and a fake pytest.py."""
    app = root / APP.lstrip("/")
    shutil.rmtree(app / "tests", ignore_errors=True)
    (app / "conftest.py").write_text(PLANTED_CONFTEST)
    (app / "pytest.py").write_text(PLANTED_PYTEST)


def failure_cases(repo: Repo, change: Change, partial: str | None) -> dict[str, Effect]:
    cases: dict[str, Effect] = {"tamper_tests": tamper_tests}
    constant = replace_body(change.changed, change.targets[0], "return None")
    cases["return_constant"] = write_module(change.module, constant)
    collateral = collateral_target(repo, change)
    if collateral is not None:
        module, function = collateral
        base = change.original if module == change.module else repo.text(module)
        broken = replace_body(base, function, "raise NotImplementedError")

        def fix_and_break(root: Path) -> None:
            write_module(change.module, change.original)(root)
            write_module(module, broken)(root)
        cases["collateral"] = fix_and_break
    if partial is not None:
        cases["partial"] = write_module(change.module, partial)
    return cases


def draft(repo: Repo, change: Change, wording: Wording, *, partial: str | None = None,
          chosen: list[str] | None = None) -> TaskDraft:
    """The task for ``change``: instruction, verifier, reverse patch, files, effects and its own dry run."""
    files = task_files(repo, change)
    cases = failure_cases(repo, change, partial)
    literals = [*wording.literals, f"{APP}/{repo.package}", f"{change.validation.total} tests",
                first_message(change.validation, chosen)]
    return TaskDraft(title=wording.title, instruction=instruction(repo, change, wording, chosen), spec=spec(change),
                     solution=solution(change), required_literals=literals,
                     oracle=write_module(change.module, change.original), failure_cases=cases,
                     difficulty=wording.difficulty, needed_actions=list(NEEDED_ACTIONS),
                     dry_run=dry_runner(change, files, cases), files=files)


def dry_runner(change: Change, files: dict[str, str],
               cases: dict[str, Effect]) -> Callable[[Path, Path], dict[str, float]]:
    """Runs the compiled verifier on host copies of the image's /app: the changed repository (nop), the
    oracle's and every failure case's."""
    def dry_run(tests_dir: Path, state: Path) -> dict[str, float]:
        problem = change.validation.problem()
        if problem:
            raise ValueError(f"not a bug to fix: {problem}")
        everything: dict[str, Effect | None] = {"nop": None, "oracle": write_module(change.module, change.original),
                                                **cases}
        with tempfile.TemporaryDirectory(prefix="forge-synth-code-") as tmp:
            def reward(item: tuple[int, tuple[str, Effect | None]]) -> tuple[str, float]:
                index, (name, effect) = item
                root = Path(tmp) / f"root-{index}"
                shutil.copytree(state / APP.lstrip("/"), root / APP.lstrip("/"), ignore=shutil.ignore_patterns(
                    "__pycache__", ".git"))
                shutil.copytree(tests_dir, root / "tests")
                for relative, text in files.items():
                    in_image = relative.startswith(ENV_REPO + "/")
                    target = root / APP.lstrip("/") / relative[len(ENV_REPO) + 1:] if in_image else root / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text, encoding="utf-8")
                if effect is not None:
                    effect(root)
                verdict = run_compiled(root / "tests", root, out=Path(tmp) / f"out-{index}", timeout=SUITE_TIMEOUT_SEC,
                                       env=QUIET_ENV)
                return name, verdict.reward if verdict.reward is not None else float("nan")

            with ThreadPoolExecutor(max_workers=DRY_RUN_WORKERS) as pool:
                return dict(pool.map(reward, enumerate(everything.items())))
    return dry_run
