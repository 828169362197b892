"""Bug-injection families (SWE-smith's procedural modifiers): one family per mutation operator, and
``code.bug.combine`` (two validated bugs in one module, SWE-smith's Combine).

A candidate names its mutation ``{module, function, site}`` (the site's index among the operator's
sites in that function). ``sample`` walks the repository's sites in a seeded order and returns the first
whose mutation is a bug to fix on this host (F2P >= 1, P2P >= 1, F2P <= half, no hang), so procedural
candidates are validated before they are proposed; ``check_params`` rejects other parameters (a model's)
with the reason.

Invariant: ``render`` is pure given the parameters and the repository (mutations are text edits, test
runs are memoised and deterministic), so the same seed writes the same task.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.code.mutations import OPERATORS, Source, apply, functions, mutate, sites
from openforgerl.synth.families.code.task import APP, Change, Repo, Wording, draft, make_change, repo_at
from openforgerl.synth.family import Difficulty, Family, TaskDraft

MAX_TRIES = 6
"""Sites tried per sample before giving up (and proposing one the grounding stage will reject)."""


@lru_cache(maxsize=256)
def all_sites(repo: Repo, operator: str) -> list[tuple[str, str, int]]:
    """(module, function, site) for every mutation ``operator`` can make in the repository."""
    found = []
    for module in repo.modules:
        source = Source(repo.text(module))
        for function in functions(source):
            found += [(module, function.qualname, index) for index in range(len(sites(operator, source, function)))]
    return found


def structural_problem(repo: Repo, operator: str, params: dict[str, Any]) -> str | None:
    """Why ``params`` name no mutation of the repository, or None."""
    module, function, site = params.get("module"), params.get("function"), params.get("site")
    if module not in repo.modules:
        return f"the repository has no module {module!r} (it has {', '.join(repo.modules)})"
    if not isinstance(site, int) or isinstance(site, bool):
        return f"site must be an integer, not {site!r}"
    count = sum(1 for m, f, _ in all_sites(repo, operator) if (m, f) == (module, function))
    if count == 0:
        return f"{operator} cannot change a function {function!r} in {module}"
    if not 0 <= site < count:
        return f"{operator} has {count} sites in {function}, so there is no site {site}"
    return None


def topic(change: Change) -> str:
    first = change.validation.f2p[0].split("::")[0] if change.validation.f2p else change.module
    return Path(first).stem.removeprefix("test_")


class BugFamily(Family):
    """A bug made by one mutation operator at one site of one function."""

    domain = "code"
    operator: ClassVar[str]
    level: ClassVar[Difficulty] = "easy"

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        repo = repo_at(state)
        choices = all_sites(repo, self.operator)
        if not choices:
            raise ValueError(f"{self.operator} finds nothing to change in {repo.package}")
        order = rng.sample(choices, min(MAX_TRIES, len(choices)))
        for module, function, site in order:
            params = {"module": module, "function": function, "site": site}
            if self._change(repo, params).validation.problem() is None:
                return params
        module, function, site = order[0]
        return {"module": module, "function": function, "site": site}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        found = all_sites(repo_at(state), self.operator)
        return {"type": "object", "additionalProperties": False, "required": ["module", "function", "site"],
                "properties": {"module": {"enum": sorted({m for m, _, _ in found})},
                               "function": {"enum": sorted({f for _, f, _ in found})},
                               "site": {"type": "integer", "minimum": 0}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        repo = repo_at(state)
        problem = structural_problem(repo, self.operator, params)
        if problem:
            return problem
        problem = self._change(repo, params).validation.problem()
        return f"the mutation is no bug to fix: {problem}" if problem else None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        repo = repo_at(state)
        change = self._change(repo, params)
        wording = Wording(title=f"Fix a bug in {repo.package} ({topic(change)})",
                          opening=f"The Python library `{repo.package}` in {APP} has a bug: some of its functions "
                                  "no longer do what their documentation and tests say.",
                          examples_intro=f"This is what goes wrong (run from {APP}):", difficulty=self.level)
        return draft(repo, change, wording)

    def _change(self, repo: Repo, params: dict[str, Any]) -> Change:
        module, function = params["module"], params["function"]
        changed = mutate(repo.text(module), self.operator, function, params["site"])
        return make_change(repo, module, changed, [function])


class OpChange(BugFamily):
    """An operator changed: + and -, < and <=, == and !=, in and not in, and and or."""

    name, operator = "code.bug.op_change", "op_change"


class OpSwap(BugFamily):
    """The operands of a binary operator or a comparison swapped."""

    name, operator = "code.bug.op_swap", "op_swap"


class OffByOne(BugFamily):
    """An integer constant (a bound, an index, a slice end) one too high or too low."""

    name, operator = "code.bug.off_by_one", "off_by_one"


class SwapArgs(BugFamily):
    """Two neighbouring positional arguments of a call swapped."""

    name, operator = "code.bug.swap_args", "swap_args"


class RemoveCond(BugFamily):
    """An if statement (or an elif branch) without an else dropped."""

    name, operator, level = "code.bug.remove_cond", "remove_cond", "medium"


class RemoveLoop(BugFamily):
    """A for or while loop dropped."""

    name, operator, level = "code.bug.remove_loop", "remove_loop", "medium"


class RemoveAssign(BugFamily):
    """An assignment or augmented assignment dropped."""

    name, operator, level = "code.bug.remove_assign", "remove_assign", "medium"


class CtrlInvertIf(BugFamily):
    """The branches of an if/else statement (or of a conditional expression) swapped."""

    name, operator, level = "code.bug.ctrl_invert_if", "ctrl_invert_if", "medium"


class Combine(Family):
    """Two validated bugs (any operators) in two functions of one module; fixing one of them is a partial job."""

    name = "code.bug.combine"
    domain = "code"
    description = "Two bugs in one module (SWE-smith's Combine): both must be found."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        repo = repo_at(state)
        modules = [m for m in repo.modules if len(functions(Source(repo.text(m)))) >= 2]
        if not modules:
            raise ValueError(f"{repo.package} has no module with two functions to break")
        module = rng.choice(modules)
        singles = [{"operator": op, "function": f, "site": s} for op in OPERATORS
                   for m, f, s in all_sites(repo, op) if m == module]
        picked: list[dict[str, Any]] = []
        for bug in rng.sample(singles, min(3 * MAX_TRIES, len(singles))):
            if any(p["function"] == bug["function"] for p in picked):
                continue
            if self._single(repo, module, bug).validation.problem() is None:
                picked.append(bug)
            if len(picked) == 2:
                params = {"module": module, "bugs": picked}
                if self._change(repo, params).validation.problem() is None:
                    return params
                picked.pop()
        return {"module": module, "bugs": (picked + singles[:2])[:2]}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        repo = repo_at(state)
        bug = {"type": "object", "additionalProperties": False, "required": ["operator", "function", "site"],
               "properties": {"operator": {"enum": list(OPERATORS)},
                              "function": {"enum": sorted({f for op in OPERATORS for _, f, _ in all_sites(repo, op)})},
                              "site": {"type": "integer", "minimum": 0}}}
        return {"type": "object", "additionalProperties": False, "required": ["module", "bugs"],
                "properties": {"module": {"enum": list(repo.modules)},
                               "bugs": {"type": "array", "items": bug, "minItems": 2, "maxItems": 2}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        repo = repo_at(state)
        bugs, module = params.get("bugs"), str(params.get("module"))
        if not isinstance(bugs, list) or len(bugs) != 2 or not all(isinstance(b, dict) for b in bugs):
            return "bugs must be a list of two {operator, function, site} objects"
        if bugs[0].get("function") == bugs[1].get("function"):
            return "the two bugs must be in different functions"
        for bug in bugs:
            if bug.get("operator") not in OPERATORS:
                return f"unknown operator {bug.get('operator')!r} (known: {', '.join(OPERATORS)})"
            problem = structural_problem(repo, bug["operator"], {**bug, "module": module}) or \
                self._single(repo, module, bug).validation.problem()
            if problem:
                return f"bug {bug.get('operator')} in {bug.get('function')}: {problem}"
        problem = self._change(repo, params).validation.problem()
        return f"the two bugs together are no task: {problem}" if problem else None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        repo = repo_at(state)
        module, bugs = params["module"], params["bugs"]
        change = self._change(repo, params)
        singles = [self._single(repo, module, bug) for bug in bugs]
        chosen = list(dict.fromkeys(next((t for t in s.validation.f2p if t in change.validation.f2p),
                                         change.validation.f2p[0]) for s in singles))
        # Undoing one bug only leaves the other one: a partial job that must score 0.
        partial = singles[1].changed
        wording = Wording(title=f"Fix the bugs in {repo.package} ({Path(module).stem})",
                          opening=f"The Python library `{repo.package}` in {APP} has more than one bug: several of "
                                  "its functions no longer do what their documentation and tests say.",
                          examples_intro=f"This is some of what goes wrong (run from {APP}):", difficulty="hard")
        return draft(repo, change, wording, partial=partial, chosen=chosen)

    def _single(self, repo: Repo, module: str, bug: dict[str, Any]) -> Change:
        changed = mutate(repo.text(module), bug["operator"], bug["function"], bug["site"])
        return make_change(repo, module, changed, [bug["function"]])

    def _change(self, repo: Repo, params: dict[str, Any]) -> Change:
        module, bugs = params["module"], params["bugs"]
        text = repo.text(module)
        source = Source(text)
        edits = []
        for bug in bugs:
            function = next(f for f in functions(source) if f.qualname == bug["function"])
            edits += sites(bug["operator"], source, function)[bug["site"]]
        return make_change(repo, module, apply(text, edits), [bug["function"] for bug in bugs])
