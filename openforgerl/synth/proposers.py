"""Proposers: where candidate tasks come from.

- ``procedural`` (the default; no model): round-robin over (asset, family) pairs for balance, each
  candidate's parameters drawn from its own seeded generator, so candidate i is the same whatever
  was proposed before it.
- ``llm``: a model (any OpenAI-compatible endpoint) picks a family's parameters from the asset's
  real entities and rewords the instruction (``synth/llm.py``); the family still renders the
  verifier, solution and failure cases.
- ``mixed``: alternates the two.

Invariant: a proposal is only parameters (+ an optional reworded instruction); verifiability always
comes from the family's code.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from openforgerl.synth.assets import Asset
from openforgerl.synth.candidate import Candidate
from openforgerl.synth.family import Family


@dataclass
class Slot:
    """One (asset, family) pair and the asset's starting state on this host."""

    asset: Asset
    family: Family
    state: Path


def candidate_id(slot: Slot, index: int) -> str:
    verb = slot.family.name.split(".")[-1]
    return f"{slot.asset.domain}-{slot.asset.name}-{verb}-{index:05d}"


def candidate_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"forge-synth:{seed}:{index}")


def procedural(slot: Slot, index: int, seed: int) -> Candidate:
    """Candidate ``index`` of a run with ``seed``, from ``slot``'s family."""
    params = slot.family.sample(candidate_rng(seed, index), slot.asset, slot.state)
    return Candidate(id=candidate_id(slot, index), domain=slot.asset.domain, asset=slot.asset.name,
                     family=slot.family.name, params=params, proposer="procedural", index=index)


def slots_round_robin(slots: list[Slot]) -> Iterator[tuple[int, Slot]]:
    """(index, slot) forever: every family of every asset in turn."""
    for index in itertools.count():
        yield index, slots[index % len(slots)]
