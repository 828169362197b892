"""The gui families on the bundled web apps, over many seeds: every candidate passes the host filters
(nop 0, oracle 1, each failure case 0 on the app's real seeded database), names every value its
verifier compares, and is written byte-identically from the same seed; made-up entities are refused."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforgerl.synth.assets import bundled_assets
from openforgerl.synth.critic import criticise, normalise
from openforgerl.synth.families import FAMILIES, family
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.writer import write_task
from openforgerl.tasks import Task
from openforgerl.verifiers import make_verifier

GUI_FAMILIES = sorted(name for name in FAMILIES.builtins if name.startswith("gui."))
DRY_RUN_EXAMPLES = 5
"""Each dry run is several verifier subprocesses (~0.5 s of CPU a candidate), so fewer seeds than for rendering."""
RENDER_EXAMPLES = 25
MADE_UP: dict[str, dict[str, Any]] = {
    "gui.todo.add": {"list": "Holidays"},
    "gui.todo.complete": {"title": "Feed the dragon"},
    "gui.todo.rename": {"title": "Feed the dragon"},
    "gui.todo.delete": {"title": "Feed the dragon"},
    "gui.todo.count": {"list": "Holidays"},
    "gui.shop.buy": {"items": [{"product": "Unicorn Milk", "quantity": 1}]},
    "gui.shop.price_extreme": {"category": "Spaceships"},
    "gui.shop.cancel": {"order": 999},
    "gui.booking.book": {"room": "Ballroom"},
    "gui.booking.cancel": {"room": "Ballroom"},
    "gui.booking.reschedule": {"new_day": "2027-03-06"},
    "gui.booking.count_free": {"day": "2027-02-30"},
    "gui.contacts.add": {"email": "not-an-address"},
    "gui.contacts.edit": {"name": "Zaphod Beeblebrox"},
    "gui.contacts.delete": {"name": "Zaphod Beeblebrox"},
    "gui.contacts.lookup": {"name": "Zaphod Beeblebrox"},
}


@pytest.fixture(scope="module")
def slots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Slot]:
    """Family name -> its asset and the asset's starting state (seeded once for the module)."""
    found: dict[str, Slot] = {}
    for asset in bundled_assets("gui"):
        state = asset.materialize(tmp_path_factory.mktemp(f"state-{asset.name}"))
        found |= {name: Slot(asset, family(name), state) for name in asset.config.families}
    return found


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_there_are_four_apps_and_every_family_belongs_to_one(slots: dict[str, Slot]):
    assert {a.name for a in bundled_assets("gui")} >= {"todo", "shop", "booking", "contacts"}
    assert sorted(slots) == GUI_FAMILIES and len(GUI_FAMILIES) >= 5
    assert all(slot.family.name.split(".")[1] == slot.asset.name for slot in slots.values())
    environments = {slot.asset.name: slot.asset.config.environment for slot in slots.values()}
    assert all(env == {"webapp": "webapp"} for env in environments.values())


@pytest.mark.parametrize("name", GUI_FAMILIES)
@settings(max_examples=DRY_RUN_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, 99_999))
def test_every_candidate_passes_the_host_filters_with_nop_0_oracle_1_failures_0(slots: dict[str, Slot], name: str,
                                                                                 seed: int, index: int):
    slot = slots[name]
    candidate = procedural(slot, index, seed)
    assert criticise(candidate, slot.family, slot.asset, slot.state), (candidate.reason_code, candidate.reason)
    draft = candidate.draft
    assert draft is not None and candidate.stage == "dry_run"
    assert candidate.dry_run["nop"] == 0.0 and candidate.dry_run["oracle"] == 1.0
    assert len(draft.failure_cases) >= 2 and all(candidate.dry_run[case] == 0.0 for case in draft.failure_cases)


@pytest.mark.parametrize("name", GUI_FAMILIES)
@settings(max_examples=RENDER_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, 99_999))
def test_every_candidate_names_what_is_checked_and_is_written_identically(slots: dict[str, Slot], name: str,
                                                                          seed: int, index: int):
    slot = slots[name]
    candidate = procedural(slot, index, seed)
    assert slot.family.check_params(candidate.params, slot.asset, slot.state) is None
    draft = candidate.draft = slot.family.render(candidate.params, slot.asset, slot.state)
    make_verifier(draft.spec)
    assert draft.required_literals and all(normalise(str(value)) in normalise(draft.instruction)
                                           for value in draft.required_literals)
    assert "/var/lib/webapp" not in draft.instruction  # the database is the app's, never the agent's business

    again = procedural(slot, index, seed)
    again.draft = slot.family.render(again.params, slot.asset, slot.state)
    with tempfile.TemporaryDirectory() as tmp:
        first, second = write_task(candidate, slot.asset, Path(tmp) / "a"), write_task(again, slot.asset, Path(tmp) / "b")
        assert tree(first) == tree(second)
        task = Task.load(first)
        assert task.config.environment.template == "gui" and task.config.environment.state_stores == ["/var/lib/webapp"]
        assert (first / "environment" / "webapp" / "app.py").is_file()
        assert not (first / "environment" / "webapp" / "webkit.py").is_symlink()


@pytest.mark.parametrize("name", GUI_FAMILIES)
def test_made_up_entities_are_refused_before_rendering(slots: dict[str, Slot], name: str):
    slot = slots[name]
    candidate = procedural(slot, 0, seed=5)
    assert slot.family.check_params(candidate.params, slot.asset, slot.state) is None
    candidate.params |= MADE_UP[name]
    why = slot.family.check_params(candidate.params, slot.asset, slot.state)
    assert why and any(str(v) in why for v in _leaves(MADE_UP[name])), why
    assert not criticise(candidate, slot.family, slot.asset, slot.state) and candidate.reason_code == "grounding"


@pytest.mark.parametrize("name", GUI_FAMILIES)
def test_a_wording_an_llm_proposer_writes_oddly_renders_instead_of_crashing_the_candidate(slots: dict[str, Slot],
                                                                                         name: str):
    slot = slots[name]
    candidate = procedural(slot, 0, seed=5)
    rendered = {}
    for phrasing in (0, slot.family.phrasings - 1, str(slot.family.phrasings - 1), "two", None, 99, -1):
        rendered[repr(phrasing)] = slot.family.render(candidate.params | {"phrasing": phrasing}, slot.asset,
                                                      slot.state).instruction
    last = rendered[repr(slot.family.phrasings - 1)]
    assert rendered[repr(str(slot.family.phrasings - 1))] == last  # "2" (a model's JSON string) is wording 2
    assert rendered["'two'"] == rendered["None"] == rendered["99"] == rendered["-1"] == rendered["0"]


@pytest.mark.parametrize("name", GUI_FAMILIES)
def test_sampled_parameters_fit_the_schema_given_to_a_model(slots: dict[str, Slot], name: str):
    jsonschema = pytest.importorskip("jsonschema")
    slot = slots[name]
    schema = slot.family.params_schema(slot.asset, slot.state)
    for index in range(5):
        jsonschema.validate(procedural(slot, index, seed=11).params, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(procedural(slot, 0, seed=11).params | MADE_UP[name], schema)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]
