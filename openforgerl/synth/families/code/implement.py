"""``code.implement.function``: a function's body is replaced by ``raise NotImplementedError`` (signature and
docstring kept) and the agent writes it again (SWE-smith's LM Rewrite, without a model).

Candidates are functions with a docstring that return a value and are complex enough (``MIN_COMPLEXITY``)
to be more than a one-liner; the stub must be a task (F2P >= 1, P2P >= 1, F2P <= half the suite).
A partial job (the function back without its first ``if``) is a failure case when the tests tell it apart.
"""

from __future__ import annotations

import ast
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.code.bugs import MAX_TRIES
from openforgerl.synth.families.code.mutations import Source, first_if_removed, functions, replace_body, returns_value
from openforgerl.synth.families.code.suite import validate
from openforgerl.synth.families.code.task import APP, Change, Repo, Wording, draft, make_change, repo_at
from openforgerl.synth.family import Family, TaskDraft

STUB = "raise NotImplementedError"
LONG_BODY_LINES = 12


@lru_cache(maxsize=64)
def stubbable(repo: Repo) -> list[tuple[str, str]]:
    """(module, function) pairs worth implementing: documented, returning a value, complex enough."""
    found = []
    for module in repo.modules:
        for function in functions(Source(repo.text(module))):
            documented = ast.get_docstring(function.node) is not None
            if documented and returns_value(function):
                found.append((module, function.qualname))
    return found


class ImplementFunction(Family):
    """Write a function again from its signature and docstring."""

    name = "code.implement.function"
    domain = "code"
    description = "A function's body removed (docstring kept): implement it so the whole suite passes."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        repo = repo_at(state)
        choices = stubbable(repo)
        if not choices:
            raise ValueError(f"{repo.package} has no documented function to implement")
        order = rng.sample(choices, min(MAX_TRIES, len(choices)))
        for module, function in order:
            if self._change(repo, module, function).validation.problem() is None:
                return {"module": module, "function": function}
        return {"module": order[0][0], "function": order[0][1]}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        choices = stubbable(repo_at(state))
        return {"type": "object", "additionalProperties": False, "required": ["module", "function"],
                "properties": {"module": {"enum": sorted({m for m, _ in choices})},
                               "function": {"enum": sorted({f for _, f in choices})}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        repo = repo_at(state)
        module, function = str(params.get("module")), str(params.get("function"))
        if module not in repo.modules:
            return f"the repository has no module {module!r} (it has {', '.join(repo.modules)})"
        if (module, function) not in stubbable(repo):
            known = sorted(f for m, f in stubbable(repo) if m == module)
            return f"{module} has no documented function {function!r} to implement (it has {', '.join(known)})"
        problem = self._change(repo, module, function).validation.problem()
        return f"removing its body is no task: {problem}" if problem else None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        repo = repo_at(state)
        module, function = params["module"], params["function"]
        change = self._change(repo, module, function)
        node = next(f.node for f in functions(Source(change.original)) if f.qualname == function)
        long = (node.end_lineno or node.lineno) - node.lineno > LONG_BODY_LINES
        wording = Wording(title=f"Implement {function} in {repo.package}",
                          opening=f"In the Python library `{repo.package}` in {APP}, the function `{function}` in "
                                  f"{APP}/{module} has no implementation: its body only raises NotImplementedError. "
                                  "Implement it as its docstring describes (the rest of the library shows the "
                                  "conventions).",
                          examples_intro=f"For example, this must work (run from {APP}):",
                          literals=[function, f"{APP}/{module}"], difficulty="hard" if long else "medium")
        return draft(repo, change, wording, partial=self._partial(repo, change))

    def _change(self, repo: Repo, module: str, function: str) -> Change:
        return make_change(repo, module, replace_body(repo.text(module), function, STUB), [function])

    def _partial(self, repo: Repo, change: Change) -> str | None:
        """The function written back without its first ``if``, when the suite notices (it must score 0)."""
        partial = first_if_removed(change.original, change.targets[0])
        if partial is None or not validate(repo.app, {change.module: partial}).f2p:
            return None
        return partial
