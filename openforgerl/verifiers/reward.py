"""The reward contract between a verifier and whoever runs it: files in ``/logs/verifier``.

A verifier writes ``reward.json`` (``{"reward": number, ...metrics}``) or ``reward.txt`` (one
number) into ``VERIFIER_DIR``. Invariant: ``parse_reward_files`` accepts only a finite number as
the reward; anything else is an error (a verifier error, never a reward of 0 or 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERIFIER_DIR = "/logs/verifier"
REWARD_JSON, REWARD_TXT = "reward.json", "reward.txt"


@dataclass
class Verdict:
    """What the verifier decided. ``error`` set means it could not decide (verifier_error)."""

    reward: float | None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    signal: int | None = None
    """The signal that ended the verifier's own process, when one did (not its timeout): nothing but the code
    it runs (the agent's work) or the kernel's OOM killer sends one, since the agent's processes end before it."""
    timed_out: bool = False
    """The verifier ran past its timeout and was killed."""
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""


def parse_reward_files(folder: Path) -> Verdict:
    """reward.json ``{"reward": number, ...metrics}`` wins; else reward.txt holding one number."""
    as_json, as_text = folder / REWARD_JSON, folder / REWARD_TXT
    if as_json.is_file():
        try:
            data = json.loads(as_json.read_text())
        except ValueError as exc:
            return Verdict(None, error=f"reward.json is not JSON: {exc}")
        if not isinstance(data, dict) or "reward" not in data:
            return Verdict(None, error='reward.json must be an object with a "reward" number')
        return _checked(data.pop("reward"), data)
    if as_text.is_file():
        text = as_text.read_text().strip()
        try:
            return _checked(float(text), {})
        except ValueError:
            return Verdict(None, error=f"reward.txt does not hold a number: {text[:80]!r}")
    return Verdict(None, error="the verifier wrote neither reward.json nor reward.txt")


def _checked(value: Any, metrics: dict[str, Any]) -> Verdict:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return Verdict(None, metrics, error=f"reward must be a finite number, got {value!r}")
    return Verdict(float(value), metrics)
