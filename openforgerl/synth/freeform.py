"""Free-form tasks, for strong models: the model writes the whole task, verifier included.

A free-form proposal is an instruction, a verifier spec, a reference solution (bash) and failure
cases (bash scripts that do the task wrong, each of which must score 0). Nothing a model writes runs
on this host: the verifier may use only declarative checks (files, JSON, SQLite: no commands, no
test suites, no network, no judge), so the host dry run can safely score doing nothing (it must be
0); the solution and the failure cases run only in build-env's containers (the oracle must score 1,
each failure case, shipped as solution/failures/NAME.sh, 0). Invariant: a free-form task is kept
only when those containers agreed, so ``--no-build`` leaves it unvalidated and says so.

The family is the asset's procedural family turned inside out: its sample, rendered, is the example
the model is shown, so a model sees a task of the same environment that is known to be right.
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.errors import UserError
from openforgerl.synth.assets import Asset
from openforgerl.synth.family import Family, TaskDraft
from openforgerl.verifiers import make_verifier, run_compiled

DECLARATIVE = frozenset({"file_exists", "file_contains", "file_regex", "json_path", "sqlite", "all", "any",
                         "weighted"})
"""Check kinds a model may use: they read files and run nothing the model wrote."""
LITERAL_KEYS = ("text", "equals", "expect_scalar")
"""Fields of a check whose scalar value the instruction must name."""
FAILURE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
MAX_SCRIPT = 4000
EXAMPLE_DRAWS = 8
MAX_FAILURES = 5


class FreeformFamily(Family):
    """``<domain>.freeform`` on one asset, with ``base`` (one of the asset's families) for examples."""

    description: ClassVar[str] = ("write the whole task: instruction, verifier (declarative checks only), "
                                  "solution, and failure cases that must score 0")

    def __init__(self, base: Family) -> None:
        self.base = base
        self.name = f"{base.domain}.freeform"  # type: ignore[misc]
        self.domain = base.domain  # type: ignore[misc]

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        """An example: a task of the base family, written out as a free-form proposal would be (one whose
        verifier is declarative when a few draws find one; the prompt lists the allowed shapes anyway)."""
        for _ in range(EXAMPLE_DRAWS):
            draft = self.base.render(self.base.sample(rng, asset, state), asset, state)
            if set(_kinds(draft.spec)) <= DECLARATIVE:
                break
        return {"title": draft.title, "instruction": draft.instruction, "verifier": draft.spec,
                "solution": draft.solution, "failure_cases": {"do_nothing_useful": "#!/bin/bash\ntrue\n"}}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        text = {"type": "string", "minLength": 1}
        return {"type": "object", "required": ["title", "instruction", "verifier", "solution", "failure_cases"],
                "properties": {"title": {**text, "maxLength": 100}, "instruction": {**text, "maxLength": 2000},
                               "verifier": {"type": "object", "required": ["type"], "properties": {
                                   "type": {"enum": sorted(DECLARATIVE)}}},
                               "solution": {**text, "maxLength": MAX_SCRIPT},
                               "failure_cases": {"type": "object", "minProperties": 1,
                                                 "maxProperties": MAX_FAILURES,
                                                 "additionalProperties": {**text, "maxLength": MAX_SCRIPT}}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        for key in ("title", "instruction", "solution"):
            if not isinstance(params.get(key), str) or not params[key].strip():
                return f"{key} must be a non-empty string"
        spec = params.get("verifier")
        if not isinstance(spec, dict):
            return "verifier must be a verifier spec object"
        kinds = set(_kinds(spec))
        if not kinds <= DECLARATIVE:
            return (f"the verifier uses {', '.join(sorted(kinds - DECLARATIVE))}; a model's verifier may use only "
                    f"{', '.join(sorted(DECLARATIVE))}")
        try:
            make_verifier(spec)
        except UserError as exc:
            return f"the verifier spec does not validate: {exc}"
        cases = params.get("failure_cases")
        if not isinstance(cases, dict) or not 1 <= len(cases) <= MAX_FAILURES:
            return f"failure_cases must map 1 to {MAX_FAILURES} names to bash scripts"
        for name, script in cases.items():
            if not FAILURE_NAME.fullmatch(str(name)) or not isinstance(script, str) or not script.strip():
                return f"failure case {name!r}: a lower_snake_case name and a non-empty bash script"
        scripts = {"solution": params["solution"], **{f"failure case {k!r}": v for k, v in cases.items()}}
        too_long = [what for what, text in scripts.items() if len(text) > MAX_SCRIPT]
        if too_long:
            return f"the {too_long[0]} is longer than {MAX_SCRIPT} characters"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        spec = params["verifier"]
        files = {f"solution/failures/{name}.sh": _script(text) for name, text in params["failure_cases"].items()}
        return TaskDraft(title=params["title"].strip(), instruction=params["instruction"].strip(), spec=spec,
                         solution=_body(params["solution"]), required_literals=_literals(spec),
                         oracle=_never, difficulty="medium", needed_actions=list(self.base_actions()),
                         dry_run=nop_only, files=files, sandbox_only=True)

    def signature(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"verifier": params.get("verifier")}

    def base_actions(self) -> list[str]:
        return ["read", "write"] if self.domain != "gui" else ["browse", "observe"]


def nop_only(tests: Path, state: Path) -> dict[str, float]:
    """The host dry run of a free-form task: its (declarative) verifier on the untouched state. The
    oracle and the failure cases are the model's scripts; they run only in build-env's containers."""
    with tempfile.TemporaryDirectory(prefix="forge-synth-freeform-") as tmp:
        root = Path(tmp) / "root"
        shutil.copytree(state, root, symlinks=True)
        verdict = run_compiled(tests, root, out=Path(tmp) / "out", timeout=60)
    return {"nop": verdict.reward if verdict.reward is not None else float("nan")}


def _kinds(spec: Any) -> list[str]:
    if not isinstance(spec, dict):
        return []
    children = _children(spec)
    return [str(spec.get("type"))] + [kind for child in children for kind in _kinds(child)]


def _children(spec: dict[str, Any]) -> list[Any]:
    checks = spec.get("checks")
    return checks if isinstance(checks, list) else []


def _literals(spec: dict[str, Any]) -> list[str]:
    found = [str(spec[key]) for key in LITERAL_KEYS if isinstance(spec.get(key), str | int | float)
             and not isinstance(spec.get(key), bool)]
    children = _children(spec)
    return found + [v for child in children if isinstance(child, dict) for v in _literals(child)]


def _body(script: str) -> str:
    return script.removeprefix("#!/bin/bash").lstrip("\n").rstrip() + "\n"


def _script(text: str) -> str:
    return "#!/bin/bash\n" + _body(text)


def _never(root: Path) -> None:
    raise AssertionError("a free-form task's solution runs only in a container")
