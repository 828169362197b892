"""The synth core on a toy family: proposals are deterministic, and each filter stage rejects what it is for."""

from __future__ import annotations

from pathlib import Path

import pytest
from toy import CopyNote, toy_asset

from openforgerl.errors import UserError
from openforgerl.synth.assets import load_asset
from openforgerl.synth.critic import criticise
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.writer import write_task
from openforgerl.tasks import Task


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    asset = toy_asset(tmp_path / "asset")
    return Slot(asset, CopyNote(), asset.materialize(tmp_path / "state"))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_sound_candidate_passes_every_host_stage_and_writes_identically(slot: Slot, tmp_path: Path):
    first, again = procedural(slot, 7, seed=3), procedural(slot, 7, seed=3)
    assert first.params == again.params and first.id == again.id == "claw-toy-copy-00007"
    assert criticise(first, slot.family, slot.asset, slot.state) and first.stage == "dry_run"
    assert first.dry_run == {"nop": 0.0, "oracle": 1.0, "wrong_note": 0.0}
    assert criticise(again, slot.family, slot.asset, slot.state)
    a, b = write_task(first, slot.asset, tmp_path / "a"), write_task(again, slot.asset, tmp_path / "b")
    assert tree(a) == tree(b)
    task = Task.load(a)
    assert task.config.environment.template == "claw" and task.config.task.needed_actions == ["write"]
    assert task.config.provenance.sources[0].sha256 == slot.asset.sha256
    assert (a / "environment" / "files" / "alpha.txt").read_text() == "first note\n"


def test_ungrounded_parameters_are_rejected_before_anything_is_rendered(slot: Slot):
    candidate = procedural(slot, 0, seed=0)
    candidate.params["note"] = "delta.txt"
    assert not criticise(candidate, slot.family, slot.asset, slot.state)
    assert (candidate.rejected_at, candidate.reason_code) == ("grounding", "grounding") and candidate.draft is None


def test_an_instruction_that_does_not_name_the_checked_values_is_rejected(slot: Slot):
    candidate = procedural(slot, 0, seed=0)
    assert not criticise(candidate, CopyNote(instruction="Copy a note somewhere."), slot.asset, slot.state)
    assert candidate.rejected_at == "literals" and "never names" in candidate.reason


def test_a_verifier_that_a_failure_case_also_passes_is_rejected_in_the_dry_run(slot: Slot):
    candidate = procedural(slot, 0, seed=0)
    assert not criticise(candidate, CopyNote(verifier_blind=True), slot.asset, slot.state)
    assert candidate.reason_code == "dry_run.failure_case" and "wrong_note" in candidate.reason


def test_relative_dates_are_a_hazard(slot: Slot):
    candidate = procedural(slot, 0, seed=0)
    family = CopyNote()
    note, target = candidate.params["note"], candidate.params["target"]
    family.instruction = f"Before tomorrow, copy {note} to /app/out/{target}."
    assert not criticise(candidate, family, slot.asset, slot.state)
    assert candidate.reason_code == "hazards" and "tomorrow" in candidate.reason


def test_a_family_that_raises_rejects_its_candidate_with_the_exception(slot: Slot):
    class Broken(CopyNote):
        def render(self, params, asset, state):
            raise KeyError("color")

    candidate = procedural(slot, 0, seed=0)
    assert not criticise(candidate, Broken(), slot.asset, slot.state)
    assert candidate.reason_code == "schema.error" and "KeyError" in candidate.reason


def test_a_broken_asset_toml_is_one_line_naming_the_field(tmp_path: Path):
    asset = toy_asset(tmp_path / "asset")
    (asset.root / "asset.toml").write_text('name = "toy"\ndomain = "web"\ntemplate = "claw"\nfamilies = ["x"]\n')
    with pytest.raises(UserError, match=r"asset.toml: domain: Input should be 'gui', 'claw' or 'code'"):
        load_asset(asset.root)
    with pytest.raises(UserError, match="no asset.toml"):
        load_asset(tmp_path)
