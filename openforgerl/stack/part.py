"""The embedded local stack as a list of parts that can be checked and made ready.

Invariant: ``Part.check`` never changes anything (``forge doctor`` is read-only);
``Part.ensure`` is idempotent and reports every change it makes as an ``Action`` with its undo.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from openforgerl.errors import StackError


@dataclass(frozen=True)
class PartStatus:
    """What ``doctor`` shows for one part."""

    name: str
    ready: bool
    detail: str
    fix: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class Action:
    """One change ``stack up`` made to the machine, and the command that reverts it."""

    did: str
    undo: str


Reporter = Callable[[Action], None]


class Part(ABC):
    """One piece of the local stack (engine, base image, registry, model, ...)."""

    name: str = "part"
    optional: bool = False

    @abstractmethod
    def check(self) -> PartStatus:
        """Report readiness without changing anything."""

    def ensure(self, report: Reporter) -> PartStatus:
        """Make the part ready (idempotent). Parts that cannot do it themselves say how."""
        status = self.check()
        if not status.ready:
            raise StackError(f"{self.name}: {status.detail}", fix=status.fix)
        return status

    def stop(self) -> list[str]:
        """Stop what ``ensure`` started (``forge stack down``); say what was stopped. Default: nothing."""
        return []

    def status(self, ready: bool, detail: str, fix: str | None = None) -> PartStatus:
        return PartStatus(self.name, ready, detail, None if ready else fix, self.optional)
