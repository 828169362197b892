"""A task family: parameters in, a verifiable task out. The program guarantees verifiability; a model
(when one is used) only picks parameters and rewords the instruction.

``Family.sample(rng, asset, state)`` draws parameters grounded in the asset's real starting state
(``state``: ``Asset.materialize`` under a host directory); ``render(params, asset, state)`` gives a
``TaskDraft``: the instruction, the verifier spec, the reference solution (``solve.sh``, run as the
agent in the sandbox), the values the instruction must name, and host **effects** — Python
functions that change a copy of the starting state the way the oracle and each failure case would —
so the host dry run can check, without Docker, that nop scores 0, the oracle 1 and every failure
case 0.

Invariant for every family: for any seed, ``render(sample(...))`` is deterministic (byte-identical
task directories), its spec validates, its instruction contains every ``required_literals`` value,
and its dry run gives nop 0, oracle 1, failure cases 0. Families check LLM-proposed parameters with
``check_params`` (grounding) before rendering them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from openforgerl.synth.assets import Asset
from openforgerl.tasks import Domain

Effect = Callable[[Path], None]
"""Changes a host copy of the starting state (its argument: the root the sandbox's / maps to)."""
Difficulty = Literal["easy", "medium", "hard"]


@dataclass
class TaskDraft:
    """Everything a task directory is written from."""

    title: str
    instruction: str
    spec: dict[str, Any]
    """A verifier spec (openforgerl/verifiers/spec.py); compiled into tests/."""
    solution: str
    """The body of solution/solve.sh (bash, run as the agent user in /app)."""
    required_literals: list[str]
    """Every value the verifier compares against, as the instruction must name it."""
    oracle: Effect
    """The solution's effect on a host copy of the starting state."""
    failure_cases: dict[str, Effect] = field(default_factory=dict)
    """Named effects that must score 0 (the wrong item, the right thing plus collateral damage...)."""
    difficulty: Difficulty = "easy"
    needed_actions: list[str] = field(default_factory=list)
    """Action kinds the task needs ([task] needed_actions; evaluation/actions.py)."""
    dry_run: Callable[[Path, Path], dict[str, float]] | None = None
    """Overrides the default dry run: (tests_dir, starting state root) -> reward per case (``nop``,
    ``oracle``, each failure case), e.g. a code family's own test runs."""
    files: dict[str, str] = field(default_factory=dict)
    """Extra files of the task directory (relative path -> text), e.g. tests/test_hidden.py."""
    sandbox_only: bool = False
    """The oracle and the failure cases are checked only in build-env's containers (a model wrote them:
    they never run on this host); the host dry run then checks nop alone."""


class Family(ABC):
    """One kind of task, for the assets that list it."""

    name: ClassVar[str]
    """Dotted: domain.asset-or-topic.verb, e.g. gui.todo.add."""
    domain: ClassVar[Domain]
    description: ClassVar[str] = ""

    @abstractmethod
    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        """Parameters drawn with ``rng`` only (determinism), grounded in ``state``."""

    @abstractmethod
    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        """The task for ``params``; pure given its arguments."""

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        """JSON schema of the parameters, with enums of the real entities (for the LLM proposer)."""
        return {"type": "object"}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        """Why ``params`` (e.g. from a model) cannot be rendered (an entity that does not exist...), or None."""
        return None

    def signature(self, params: dict[str, Any]) -> dict[str, Any]:
        """What makes two tasks the same task (defaults to every parameter)."""
        return params
