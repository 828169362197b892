"""What a verifier spec touches: the state paths it reads and what the task image must provide.

For static task checks (``forge build-env``): a compiled test.sh names no task paths itself, so
"the instruction mentions what the verifier checks" and "test dependencies are in the image" are
answered from the spec. Invariant: both walk the whole composition tree, in spec order, without
duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator

from openforgerl.verifiers.spec import (
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
)


def leaves(spec: VerifierSpec) -> Iterator[VerifierSpec]:
    """Every leaf check, depth first."""
    children = getattr(spec, "checks", None)
    if children is None:
        yield spec
        return
    for child in children:
        yield from leaves(child)


def state_paths(spec: VerifierSpec) -> list[str]:
    """Absolute container paths whose content the checks judge (the agent's work the instruction should name)."""
    found: list[str] = []
    for leaf in leaves(spec):
        if isinstance(leaf, (FileExistsCheck, FileContainsCheck, FileRegexCheck, JsonPathCheck)):
            found.append(leaf.path)
        elif isinstance(leaf, SqliteCheck):
            found.append(leaf.database)
        elif isinstance(leaf, LlmJudgeCheck):
            found.extend(leaf.inputs)
    return list(dict.fromkeys(found))


def image_needs(spec: VerifierSpec) -> list[str]:
    """Commands (``python3``) and Python modules (``python3:playwright``) the image must have."""
    needs = ["python3"]
    for leaf in leaves(spec):
        if isinstance(leaf, (CommandCheck, TestSuiteCheck)):
            needs.append("bash")
        if isinstance(leaf, TestSuiteCheck) and leaf.framework == "pytest":
            needs.append("python3:pytest")
        if isinstance(leaf, DomCheck):
            needs += ["chromium", "python3:playwright"]
        if isinstance(leaf, (HttpCheck, DomCheck)) and leaf.base_url_file:
            needs.append(leaf.base_url_file)
    return list(dict.fromkeys(needs))
