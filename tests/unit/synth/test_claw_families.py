"""The claw families on the bundled home and office assets, over many seeds: every candidate passes the host
filters (nop 0, oracle 1, each failure case 0 on the asset's real starting state: the generated home files, the
seeded Maildir and calendar), names every value its verifier compares, and is written byte-identically from the
same seed; made-up files, keys, people, messages and events are refused."""

from __future__ import annotations

import mailbox
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

CLAW_FAMILIES = sorted(name for name in FAMILIES.builtins if name.startswith("claw."))
DRY_RUN_EXAMPLES = 3
"""Each dry run is several verifier subprocesses (0.5-2 s a candidate), so fewer seeds than for rendering."""
RENDER_EXAMPLES = 15
STATE_STORES = {"home": [], "office": ["/var/mail", "/var/lib/forge"]}
MADE_UP: dict[str, dict[str, Any]] = {
    "claw.files.aggregate": {"source": "/app/finance/lottery_winnings.csv"},
    "claw.files.convert": {"source": "/app/finance/lottery_winnings.csv"},
    "claw.files.organize": {"extensions": ["exe"]},
    "claw.config.set_ini": {"file": "/app/config/rocket.ini"},
    "claw.config.set_json": {"file": "/app/config/rocket.json"},
    "claw.logs.count": {"log": "/app/logs/rocket.log"},
    "claw.contacts.export": {"org": "Acme Rocket Works"},
    "claw.ics.agenda": {"from": "2031-01-01"},
    "claw.mail.send": {"to": "zaphod@juniper.example"},
    "claw.mail.reply": {"message": "<msg-999.zaphod@juniper.example>"},
    "claw.mail.forward": {"message": "<msg-999.zaphod@juniper.example>"},
    "claw.calendar.create": {"attendees": ["zaphod@juniper.example"]},
    "claw.calendar.move": {"title": "Dragon feeding"},
    "claw.calendar.delete": {"title": "Dragon feeding"},
    "claw.calendar.schedule": {"location": "Ballroom"},
    "claw.office.accept_invite": {"message": "<msg-999.zaphod@juniper.example>"},
}


@pytest.fixture(scope="module")
def slots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Slot]:
    """Family name -> its asset and the asset's starting state (materialized once for the module)."""
    found: dict[str, Slot] = {}
    for asset in bundled_assets("claw"):
        state = asset.materialize(tmp_path_factory.mktemp(f"state-{asset.name}"))
        found |= {name: Slot(asset, family(name), state) for name in asset.config.families}
    return found


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_home_and_office_hold_every_claw_family(slots: dict[str, Slot]):
    assert {a.name for a in bundled_assets("claw")} >= {"home", "office"}
    assert sorted(slots) == CLAW_FAMILIES and len(CLAW_FAMILIES) >= 5
    assert sorted(MADE_UP) == CLAW_FAMILIES
    home = next(slot.state for slot in slots.values() if slot.asset.name == "home")
    office = next(slot.state for slot in slots.values() if slot.asset.name == "office")
    kinds = {p.suffix for p in (home / "app").rglob("*") if p.is_file()}
    assert kinds >= {".csv", ".json", ".ini", ".log", ".md", ".ics", ".vcf", ".eml"}
    assert len(mailbox.Maildir(office / "var" / "mail" / "alex", create=False)) >= 15
    assert (office / "var" / "lib" / "forge" / "calendar.json").is_file()


def test_every_task_of_an_asset_shares_one_environment(slots: dict[str, Slot], tmp_path: Path):
    environments: dict[str, set[tuple]] = {}
    for name, slot in slots.items():
        candidate = procedural(slot, 0, seed=3)
        candidate.draft = slot.family.render(candidate.params, slot.asset, slot.state)
        written = write_task(candidate, slot.asset, tmp_path / name)
        environments.setdefault(slot.asset.name, set()).add(tuple(tree(written / "environment").items()))
    assert {asset: len(trees) for asset, trees in environments.items()} == {"home": 1, "office": 1}


@pytest.mark.parametrize("name", CLAW_FAMILIES)
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


@pytest.mark.parametrize("name", CLAW_FAMILIES)
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
    assert "today" not in draft.instruction.lower()
    assert (slot.asset.name == "office") == ("forge-services wait" in draft.solution)

    again = procedural(slot, index, seed)
    again.draft = slot.family.render(again.params, slot.asset, slot.state)
    with tempfile.TemporaryDirectory() as tmp:
        first = write_task(candidate, slot.asset, Path(tmp) / "a")
        second = write_task(again, slot.asset, Path(tmp) / "b")
        assert tree(first) == tree(second)
        environment = Task.load(first).config.environment
        assert environment.template == "claw" and environment.state_stores == STATE_STORES[slot.asset.name]


@pytest.mark.parametrize("name", CLAW_FAMILIES)
def test_made_up_entities_are_refused_before_rendering(slots: dict[str, Slot], name: str):
    slot = slots[name]
    candidate = procedural(slot, 0, seed=5)
    assert slot.family.check_params(candidate.params, slot.asset, slot.state) is None
    candidate.params |= MADE_UP[name]
    why = slot.family.check_params(candidate.params, slot.asset, slot.state)
    assert why and any(str(v) in why for v in _leaves(MADE_UP[name])), why
    assert not criticise(candidate, slot.family, slot.asset, slot.state) and candidate.reason_code == "grounding"


@pytest.mark.parametrize("name", CLAW_FAMILIES)
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
