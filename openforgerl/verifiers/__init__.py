"""Verifiers: run after the agent, in the container, and write /logs/verifier/reward.json.

A verifier is a spec (``spec.py``: one pydantic model per kind, composed with all/any/weighted),
validated by ``make_verifier`` and compiled by ``compile_verifier`` into the task's ``tests/``:
test.sh + the spec as JSON + a stdlib-only runner (``runner/``) that evaluates it inside the
container. Invariant: the reward comes only from what the runner computed in this run; a check
that crashes scores 0 with its error in the metrics, it never leaves the reward file missing.
"""

from openforgerl.verifiers.compile import compile_verifier, load_verifier, make_verifier, run_compiled
from openforgerl.verifiers.footprint import image_needs, state_paths
from openforgerl.verifiers.spec import (
    AllCheck,
    AnyCheck,
    CommandCheck,
    DomCheck,
    FileContainsCheck,
    FileExistsCheck,
    FileRegexCheck,
    HttpCheck,
    JsonPathCheck,
    LlmJudgeCheck,
    SqliteCheck,
    TestSuiteCheck,
    VerifierSpec,
    WeightedCheck,
)

__all__ = [
    "AllCheck", "AnyCheck", "CommandCheck", "DomCheck", "FileContainsCheck", "FileExistsCheck", "FileRegexCheck",
    "HttpCheck", "JsonPathCheck", "LlmJudgeCheck", "SqliteCheck", "TestSuiteCheck", "VerifierSpec", "WeightedCheck",
    "compile_verifier", "image_needs", "load_verifier", "make_verifier", "run_compiled", "state_paths",
]
