"""A proposed task on its way through the filters, and how each one is decided.

Invariant: every candidate ends decided — ``kept`` or rejected at one stage with a reason code and a
sentence — and each decision is one line of candidates.jsonl, written when it is made, so no candidate
disappears silently and a rerun with ``--resume`` skips the decided ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from openforgerl.synth.family import TaskDraft

STAGES = ("proposed", "schema", "grounding", "literals", "static", "hazards", "dry_run", "dedup", "cap", "build",
          "calibrate")
"""Filter stages, cheapest first; a candidate's ``stage`` is the last one it passed."""
Decision = Literal["pending", "kept", "rejected"]


@dataclass
class Candidate:
    id: str
    domain: str
    asset: str
    family: str
    params: dict[str, Any]
    proposer: str
    """``procedural``, or ``llm:<model>`` (with ``prompt_hash``)."""
    index: int = 0
    """Its position in the proposal order (ties in dedup keep the lowest)."""
    draft: TaskDraft | None = None
    stage: str = "proposed"
    decision: Decision = "pending"
    reason_code: str | None = None
    reason: str | None = None
    prompt_hash: str | None = None
    paraphrase: str | None = None
    """A model's wording of the instruction: used only when it names every value the verifier checks."""
    notes: list[str] = field(default_factory=list)
    task_sig: str | None = None
    verifier_sig: str | None = None
    cluster: str | None = None
    max_jaccard: float | None = None
    path: str | None = None
    dry_run: dict[str, float] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    """CPU-bound seconds spent on it per stage."""

    def passed(self, stage: str) -> None:
        self.stage = stage

    def reject(self, code: str, reason: str) -> None:
        """Rejected at the stage after the last one it passed."""
        self.decision, self.reason_code, self.reason = "rejected", code, reason

    @property
    def rejected_at(self) -> str | None:
        if self.decision != "rejected":
            return None
        following = STAGES.index(self.stage) + 1
        return STAGES[following] if following < len(STAGES) else self.stage

    def record(self) -> dict[str, Any]:
        """Its line in candidates.jsonl."""
        draft = self.draft
        return {"id": self.id, "domain": self.domain, "asset": self.asset, "family": self.family,
                "params": self.params, "proposer": self.proposer, "index": self.index,
                "prompt_hash": self.prompt_hash, "decision": self.decision, "stage": self.stage,
                "rejected_at": self.rejected_at, "reason_code": self.reason_code, "reason": self.reason,
                "title": draft.title if draft else None, "instruction": draft.instruction if draft else None,
                "difficulty": draft.difficulty if draft else None, "task_sig": self.task_sig,
                "verifier_sig": self.verifier_sig, "cluster": self.cluster, "max_jaccard": self.max_jaccard,
                "dry_run": self.dry_run, "path": self.path, "build": self.build, "calibration": self.calibration,
                "seconds": self.seconds,
                "notes": self.notes}


def canonical_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()
