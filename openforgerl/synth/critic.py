"""The host-side filters a candidate passes before anything is built, cheapest first.

``schema`` (the draft is complete and its verifier spec validates) -> ``grounding`` (its parameters
name things that exist in the asset: the family's ``check_params``) -> ``literals`` (the instruction
names every value the verifier compares) -> ``static`` (build-env's static checks on the written task)
-> ``hazards`` (nothing that depends on the clock, the host or the network) -> ``dry_run`` (on a copy
of the asset's starting state on this host: nop scores 0, the oracle's effect 1, each failure case 0,
with the compiled verifier run by ``run_compiled``).

Invariant: each stage either passes the candidate or rejects it with a reason code (the stage's
name or a finer one, e.g. ``dry_run.oracle``) and one sentence with the evidence; a family bug that
raises is a rejection with its exception, never a crash of the run.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

from openforgerl.envs.checks import static_checks
from openforgerl.errors import UserError
from openforgerl.synth.assets import Asset
from openforgerl.synth.candidate import Candidate
from openforgerl.synth.family import Family, TaskDraft
from openforgerl.synth.writer import render_task
from openforgerl.tasks import Task
from openforgerl.verifiers import compile_verifier, make_verifier, run_compiled

HAZARDS = [
    (re.compile(r"\b(today|tomorrow|yesterday|tonight|this (week|month|year)|next (week|month|year)|"
                r"(next|last) (mon|tues|wednes|thurs|fri|satur|sun)day)\b", re.I), "a date relative to when it runs"),
    (re.compile(r"datetime\.(now|today|utcnow)\(|\btime\.time\(\)|\$\(date\b|`date\b|\bdate \+"), "the clock"),
    (re.compile(r"\bnproc\b|os\.cpu_count\(|/proc/cpuinfo|\$HOSTNAME\b|\bhostname\b|\buname\b"), "this host"),
    (re.compile(r"\b(curl|wget)\b[^\n]*https?://(?!127\.0\.0\.1|localhost)|https?://(?!127\.0\.0\.1|localhost)"
                r"[\w.-]+\.[a-z]{2,}", re.I), "the network"),
]
NOP_MAX, ORACLE_MIN = 0.0, 1.0


def host_env() -> dict[str, str]:
    """A verifier's ``python3`` on the host dry run is this interpreter (not a slow version-manager shim)."""
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def check_schema(candidate: Candidate) -> tuple[str, str] | None:
    draft = candidate.draft
    if draft is None:
        return "schema", "no task was rendered"
    for name in ("title", "instruction", "solution"):
        if not getattr(draft, name).strip():
            return "schema", f"the draft's {name} is empty"
    try:
        make_verifier(draft.spec)
    except UserError as exc:
        return "schema.verifier", f"the verifier spec does not validate: {exc}"
    return None


def check_literals(draft: TaskDraft) -> tuple[str, str] | None:
    text = normalise(draft.instruction)
    missing = [value for value in draft.required_literals if normalise(str(value)) not in text]
    if missing:
        named = ", ".join(repr(m) for m in missing[:5])
        return "literals", f"the instruction never names {named}, which the verifier checks"
    return None


def check_hazards(draft: TaskDraft) -> tuple[str, str] | None:
    import json

    for where, text in (("instruction", draft.instruction), ("verifier", json.dumps(draft.spec)),
                        ("solution", draft.solution)):
        for pattern, what in HAZARDS:
            found = pattern.search(text)
            if found:
                return "hazards", f"the {where} depends on {what}: {found.group(0)!r}"
    return None


def check_static(candidate: Candidate, asset: Asset) -> tuple[str, str] | None:
    with tempfile.TemporaryDirectory(prefix="forge-synth-static-") as tmp:
        folder = render_task(candidate, asset, Path(tmp) / candidate.id)
        findings = static_checks(Task.load(folder))
    if findings:
        return "static", "; ".join(str(f) for f in findings[:2])
    return None


def dry_run(draft: TaskDraft, state: Path) -> dict[str, float]:
    """Reward of nop, the oracle and each failure case, each on a fresh copy of the starting ``state``."""
    with tempfile.TemporaryDirectory(prefix="forge-synth-dry-") as tmp:
        tests = Path(tmp) / "tests"
        compile_verifier(draft.spec, tests)
        if draft.dry_run is not None:
            return draft.dry_run(tests, state)
        cases = {"nop": None, "oracle": draft.oracle, **draft.failure_cases}
        rewards: dict[str, float] = {}
        for name, effect in cases.items():
            root = Path(tmp) / f"root-{len(rewards)}"
            shutil.copytree(state, root, symlinks=True)
            if effect is not None:
                effect(root)
            verdict = run_compiled(tests, root, out=Path(tmp) / f"out-{len(rewards)}", timeout=120, env=host_env())
            rewards[name] = verdict.reward if verdict.reward is not None else float("nan")
        return rewards


def judge_dry_run(rewards: dict[str, float], sandbox_only: bool = False) -> tuple[str, str] | None:
    nop, oracle = rewards.get("nop"), rewards.get("oracle")
    if nop is None or not nop <= NOP_MAX:
        return "dry_run.nop", f"doing nothing scores {nop} (must be {NOP_MAX:g})"
    if sandbox_only:
        return None
    if oracle is None or not oracle >= ORACLE_MIN:
        return "dry_run.oracle", f"the reference solution's effect scores {oracle} (must be {ORACLE_MIN:g})"
    passing = {name: r for name, r in rewards.items() if name not in ("nop", "oracle") and not r <= NOP_MAX}
    if passing:
        name, reward = next(iter(passing.items()))
        return "dry_run.failure_case", f"failure case {name!r} scores {reward} (must be 0): the verifier misses it"
    return None


def criticise(candidate: Candidate, family: Family, asset: Asset, state: Path) -> bool:
    """Ground, render and check a proposed candidate, stage by stage; True when it passed them all."""
    stages = (("schema", lambda: _render(candidate, family, asset, state)),
              ("grounding", lambda: None),  # checked before rendering, inside _render
              ("literals", lambda: check_literals(candidate.draft)),  # type: ignore[arg-type]
              ("static", lambda: check_static(candidate, asset)),
              ("hazards", lambda: check_hazards(candidate.draft)),  # type: ignore[arg-type]
              ("dry_run", lambda: _dry_run(candidate, state)))
    for stage, check in stages:
        started = time.process_time()
        try:
            problem = check()
        except Exception as exc:  # a family's bug rejects its candidate, with the evidence
            problem = (f"{stage}.error", f"{type(exc).__name__}: {exc}")
        candidate.seconds[stage] = round(time.process_time() - started, 4)
        if problem is not None:
            if problem[0] == "grounding":
                candidate.passed("schema")
            candidate.reject(*problem)
            return False
        candidate.passed(stage)
    return True


def _render(candidate: Candidate, family: Family, asset: Asset, state: Path) -> tuple[str, str] | None:
    """Parameters checked against the asset (grounding), then the draft rendered and validated (schema)."""
    why = family.check_params(candidate.params, asset, state)
    if why:
        return "grounding", why
    candidate.draft = family.render(candidate.params, asset, state)
    if candidate.paraphrase is not None:
        _reword(candidate, candidate.draft)
    return check_schema(candidate)


def _reword(candidate: Candidate, draft: TaskDraft) -> None:
    """A model's instruction replaces the family's only when it names every checked value, safely."""
    worded = TaskDraft(**{**draft.__dict__, "instruction": candidate.paraphrase or ""})
    problem = check_literals(worded) or check_hazards(worded)
    if problem is None:
        draft.instruction = worded.instruction
        candidate.notes.append("instruction: the model's wording")
    else:
        candidate.notes.append(f"instruction: the family's, since the model's {problem[1].removeprefix('the ')}")


def _dry_run(candidate: Candidate, state: Path) -> tuple[str, str] | None:
    assert candidate.draft is not None
    candidate.dry_run = dry_run(candidate.draft, state)
    if candidate.draft.sandbox_only:
        candidate.notes.append("dry run: nop only; the oracle and failure cases run only in build-env's containers")
    return judge_dry_run(candidate.dry_run, candidate.draft.sandbox_only)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())
