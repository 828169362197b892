"""The code families on the bundled repositories, over many seeds: every kept bug (or removed body) is a bug
to fix on this host (F2P >= 1, P2P >= 1, F2P <= half the suite), the task passes the host filters (the
changed repository scores 0, the reverse patch 1, tampering with the tests, a constant answer, collateral
damage and a partial job 0), names what its verifier compares, and is written byte-identically from the
same seed; made-up functions are refused, and so are mutations that break no test or every test."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforgerl.synth.assets import bundled_assets
from openforgerl.synth.candidate import Candidate
from openforgerl.synth.critic import criticise, normalise
from openforgerl.synth.families import FAMILIES, family
from openforgerl.synth.families.code.bugs import all_sites
from openforgerl.synth.families.code.mutations import OPERATORS, Source, functions, mutate
from openforgerl.synth.families.code.suite import MAX_F2P_SHARE, validate
from openforgerl.synth.families.code.task import ENV_REPO, HIDDEN, Repo, repo_at
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.writer import write_task
from openforgerl.tasks import Task
from openforgerl.verifiers import make_verifier

CODE_FAMILIES = sorted(name for name in FAMILIES.builtins if name.startswith("code."))
REPOSITORIES = ("calc", "ledger", "spans", "textkit")
EXAMPLES = 2
"""Each example runs the repository's suite a dozen times (sampling, then the dry run: ~4 s of CPU), so few
seeds per family; across the ten families that is still twenty tasks on four repositories."""
MADE_UP_FUNCTION = "frobnicate_everything"


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Repository name -> its materialised starting state (``<state>/app``)."""
    return {asset.name: asset.materialize(tmp_path_factory.mktemp(f"state-{asset.name}"))
            for asset in bundled_assets("code")}


def slot(states: dict[str, Path], repository: str, name: str) -> Slot:
    asset = next(a for a in bundled_assets("code") if a.name == repository)
    return Slot(asset, family(name), states[repository])


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def made_up(name: str, repo: Repo) -> dict[str, Any]:
    """Parameters for ``name`` that name a function the repository does not have (built without running the
    suite: refusing them must not need it either)."""
    module = repo.modules[0]
    if name == "code.bug.combine":
        real = all_sites(repo, "op_change")[0][1]
        return {"module": module, "bugs": [{"operator": "op_change", "function": MADE_UP_FUNCTION, "site": 0},
                                           {"operator": "op_change", "function": real, "site": 0}]}
    if name == "code.implement.function":
        return {"module": module, "function": MADE_UP_FUNCTION}
    return {"module": module, "function": MADE_UP_FUNCTION, "site": 0}


def test_there_are_four_repositories_with_passing_suites_and_every_family(states: dict[str, Path]):
    assets = bundled_assets("code")
    assert {a.name for a in assets} >= set(REPOSITORIES)
    assert len(CODE_FAMILIES) >= 5 and "code.implement.function" in CODE_FAMILIES
    assert {f"code.bug.{op}" for op in OPERATORS} <= set(CODE_FAMILIES)
    for asset in assets:
        assert sorted(asset.config.families) == CODE_FAMILIES and asset.config.template == "code"
        repo = repo_at(states[asset.name])
        lines = sum(len(repo.text(m).splitlines()) for m in repo.modules)
        assert 150 <= lines <= 600, (asset.name, lines)
        total = validate(repo.app, {}).total  # raises when a test of the untouched repository fails
        assert 20 <= total <= 60, (asset.name, total)


@pytest.mark.parametrize("name", CODE_FAMILIES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repository=st.sampled_from(REPOSITORIES), seed=st.integers(0, 2**32 - 1), index=st.integers(0, 99_999))
def test_every_candidate_is_a_validated_bug_that_passes_the_host_filters(states: dict[str, Path], name: str,
                                                                          repository: str, seed: int, index: int):
    jsonschema = pytest.importorskip("jsonschema")
    code = slot(states, repository, name)
    candidate = procedural(code, index, seed)
    jsonschema.validate(candidate.params, code.family.params_schema(code.asset, code.state))
    assert code.family.check_params(candidate.params, code.asset, code.state) is None
    assert criticise(candidate, code.family, code.asset, code.state), (candidate.reason_code, candidate.reason)
    draft = candidate.draft
    assert draft is not None and candidate.stage == "dry_run"
    assert candidate.dry_run["nop"] == 0.0 and candidate.dry_run["oracle"] == 1.0
    assert {"tamper_tests", "return_constant"} <= set(draft.failure_cases)
    assert all(candidate.dry_run[case] == 0.0 for case in draft.failure_cases), candidate.dry_run

    repo = repo_at(code.state)
    module = candidate.params["module"]
    changed = draft.files[f"{ENV_REPO}/{module}"]
    validation = validate(repo.app, {module: changed})
    assert validation.problem() is None
    assert validation.f2p and validation.p2p and len(validation.f2p) <= MAX_F2P_SHARE * validation.total
    assert draft.spec["type"] == "test_suite" and draft.spec["expect_total"] == validation.total
    make_verifier(draft.spec)
    assert draft.required_literals and all(normalise(str(value)) in normalise(draft.instruction)
                                           for value in draft.required_literals)
    hidden = [path for path in draft.files if path.startswith(f"{HIDDEN}/")]
    assert len(hidden) == len(repo.tests)
    for test_id in validation.f2p:  # the failing tests are hidden, and their names are not told
        test_path, test_name = test_id.split("::")[0], test_id.split("::")[-1].split("[")[0].split(".")[-1]
        assert f"def {test_name}(" not in draft.files.get(f"{ENV_REPO}/{test_path}", repo.text(test_path))
        assert test_name not in draft.instruction

    again = procedural(code, index, seed)
    again.draft = code.family.render(again.params, code.asset, code.state)
    with tempfile.TemporaryDirectory() as tmp:
        first = write_task(candidate, code.asset, Path(tmp) / "a")
        second = write_task(again, code.asset, Path(tmp) / "b")
        assert tree(first) == tree(second)
        task = Task.load(first)
        assert task.config.environment.template == "code"
        assert (first / ENV_REPO / module).read_text() == changed != repo.text(module)
        assert "git apply" in (first / "solution" / "solve.sh").read_text()


@pytest.mark.parametrize("name", CODE_FAMILIES)
def test_made_up_functions_are_refused_before_rendering(states: dict[str, Path], name: str):
    jsonschema = pytest.importorskip("jsonschema")
    code = slot(states, "textkit", name)
    candidate = Candidate(id=f"code-textkit-made-up-{name}", domain="code", asset="textkit", family=name,
                          params=made_up(name, repo_at(code.state)), proposer="procedural")
    why = code.family.check_params(candidate.params, code.asset, code.state)
    assert why and MADE_UP_FUNCTION in why, why
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(candidate.params, code.family.params_schema(code.asset, code.state))
    assert not criticise(candidate, code.family, code.asset, code.state) and candidate.reason_code == "grounding"


def test_a_change_that_breaks_no_test_or_every_test_is_no_task(states: dict[str, Path]):
    repo = repo_at(states["textkit"])
    module = repo.modules[0]
    harmless = validate(repo.app, {module: repo.text(module) + "\n# a comment changes no behaviour\n"})
    assert not harmless.f2p and "no test fails" in (harmless.problem() or "")
    everything = validate(repo.app, {module: "raise RuntimeError('broken at import')\n"})
    assert not everything.p2p and "no test passes" in (everything.problem() or "")


def test_a_mutation_no_test_notices_is_refused_with_the_reason(states: dict[str, Path]):
    code = slot(states, "textkit", "code.bug.op_swap")
    repo = repo_at(code.state)
    for module, function, site in all_sites(repo, "op_swap"):
        changed = mutate(repo.text(module), "op_swap", function, site)
        if validate(repo.app, {module: changed}).problem() is not None:
            params = {"module": module, "function": function, "site": site}
            why = code.family.check_params(params, code.asset, code.state)
            assert why and why.startswith("the mutation is no bug to fix"), why
            return
    pytest.fail("every op_swap site of textkit is a bug; pick a repository with an unnoticed mutation")


def test_mutations_keep_every_other_line_byte_identical(states: dict[str, Path]):
    repo = repo_at(states["calc"])
    for operator in OPERATORS:
        for module, function, site in all_sites(repo, operator)[:5]:
            original = repo.text(module)
            changed = mutate(original, operator, function, site)
            assert changed != original
            Source(changed)  # still parses
            node = next(f.node for f in functions(Source(original)) if f.qualname == function)
            outside = [i for i in range(len(original.splitlines()))
                       if not node.lineno - 1 <= i < (node.end_lineno or node.lineno)]
            before, after = original.splitlines(), changed.splitlines()
            shift = len(after) - len(before)
            assert [before[i] for i in outside if i < node.lineno] == [after[i] for i in outside if i < node.lineno]
            tail = [i for i in outside if i >= node.lineno]
            assert [before[i] for i in tail] == [after[i + shift] for i in tail]
