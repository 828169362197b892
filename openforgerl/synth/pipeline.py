"""``forge synth``: propose -> host filters -> dedup -> caps -> write -> build-env -> report.

Per candidate, cheapest first: the proposal (procedural parameters, or a model's), grounding, the
rendered draft's schema, literal coverage, build-env's static checks, hazards, the host dry run
(critic.py); then exact signatures and near-duplicate instructions against the tasks kept so far,
and the per-(family, asset) cap; a survivor is written to ``OUT/tasks/<id>``. Proposing stops once
``n`` tasks are kept (or after ``max_proposals``). Then build-env builds, validates (nop/oracle in
Docker), repairs if asked and publishes them, and the report is written.

Invariant: every candidate's decision is appended to ``OUT/candidates.jsonl`` when it is made (a
later line for the same id supersedes, e.g. after build-env), so an interrupted run loses nothing
and ``resume`` continues where it stopped: decided candidates are skipped, kept ones still count.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, model_validator

from openforgerl.config import save_resolved
from openforgerl.envs.build import BuildEnvConfig, build_envs
from openforgerl.errors import UserError, map_os_errors
from openforgerl.evaluation.runner import EvalConfig, run_eval
from openforgerl.log import get_logger
from openforgerl.rollout.runtime import Runtime
from openforgerl.synth.assets import Asset, bundled_assets, find_assets
from openforgerl.synth.candidate import Candidate, canonical_hash
from openforgerl.synth.critic import criticise
from openforgerl.synth.dedup import THRESHOLD, NearDuplicates
from openforgerl.synth.families import FAMILIES, family
from openforgerl.synth.freeform import FreeformFamily
from openforgerl.synth.llm import LlmProposer, LlmSettings
from openforgerl.synth.proposers import Slot, procedural
from openforgerl.synth.report import synth_report
from openforgerl.synth.writer import write_task
from openforgerl.tasks import Domain, Task
from openforgerl.verifiers.compile import spec_json

log = get_logger(__name__)
CANDIDATES = "candidates.jsonl"
T = TypeVar("T")


class SynthConfig(BaseModel):
    """One ``forge synth`` run."""

    domain: Domain | None = None
    """gui, claw or code: the bundled assets of that domain (unless ``assets`` names others)."""
    assets: list[str] = Field(default_factory=list)
    """Asset directories (each with an asset.toml) or directories of them, instead of the bundled ones."""
    families: list[str] = Field(default_factory=list)
    """Only these families (default: every family the assets list)."""
    n: int = Field(10, ge=1)
    """Tasks to keep."""
    proposer: Literal["procedural", "llm", "mixed"] = "procedural"
    llm: LlmSettings = Field(default_factory=LlmSettings)
    """The proposer model (llm and mixed)."""
    seed: int = 0
    out: str | None = None
    """Output directory (default runs/<time>-synth): tasks/, candidates.jsonl, synth_report.json."""
    build: bool = True
    """Chain into build-env (Docker nop/oracle, repair, publish); off: stop after writing the tasks."""
    build_env: BuildEnvConfig = Field(default_factory=lambda: BuildEnvConfig(repeats=1))
    """build-env's settings (its tasks, out_dir and manifest are set by synth)."""
    max_proposals: int | None = Field(None, ge=1)
    """Give up after this many proposals (default 20 x n)."""
    dedup_threshold: float = Field(THRESHOLD, gt=0, le=1)
    """Char 5-gram Jaccard of two instructions at or above which the later one is a near duplicate."""
    max_per_family_asset: int = Field(25, ge=1)
    resume: bool = False
    """Continue a run in ``out``: skip decided candidates; kept ones count towards n."""
    calibrate: EvalConfig | None = None
    """Optional: after build-env, ``forge eval`` the published tasks with this harness and model (its
    ``tasks`` and ``run_dir`` are set by synth); each task gets pass@1 and pass@k, and those with
    0 < pass@1 < 1 (some attempts pass, not all: what GRPO learns from) are tagged ``learnable``."""

    @model_validator(mode="after")
    def _something_to_synthesize(self) -> SynthConfig:
        if self.domain is None and not self.assets:
            raise ValueError("give a domain (gui, claw, code) or assets")
        return self


@dataclass
class SynthResult:
    out: Path
    candidates: list[Candidate]
    report: dict[str, Any]
    manifest: Path | None = None

    @property
    def kept(self) -> list[Candidate]:
        return [c for c in self.candidates if c.decision == "kept"]


Progress = Callable[[str, Candidate], None]
"""Called with (event, candidate): proposed, rejected, kept, built."""


class Synthesizer:
    """One run; ``progress`` sees each candidate as it is proposed and decided."""

    def __init__(self, config: SynthConfig, progress: Progress | None = None, runtime: Runtime | None = None) -> None:
        self.config = config
        self.progress: Progress = progress or (lambda event, candidate: None)
        self.out = Path(config.out or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-synth"))
        self.slots: list[Slot] = []
        self.candidates: dict[str, Candidate] = {}
        self.resumed: dict[str, dict[str, Any]] = {}
        self._resumed_kept = 0
        self.runtime = runtime
        """The calibration's runtime (default: the one its config names)."""
        self.llm = LlmProposer(self.config.llm) if self.config.proposer != "procedural" else None
        self.near = NearDuplicates(self.config.dedup_threshold)
        self.signatures: dict[str, str] = {}
        self.per_family: Counter[tuple[str, str]] = Counter()
        self.started = time.monotonic()

    def assets(self) -> list[Asset]:
        found = find_assets(list(self.config.assets)) if self.config.assets else bundled_assets(self.config.domain)
        if self.config.domain:
            found = [a for a in found if a.domain == self.config.domain]
        if not found:
            raise UserError(f"no {self.config.domain or ''} assets to synthesize from",
                            fix="pass --domain gui|claw|code, or --assets DIR holding asset.toml files")
        return found

    def prepare(self, states: Path) -> None:
        """Assets, their families and their starting states; every name checked before anything is proposed."""
        known = set(FAMILIES.names())
        for asset in self.assets():
            unknown = [name for name in asset.config.families if name not in known]
            if unknown:
                raise UserError(f"{asset.root / 'asset.toml'}: families: unknown {', '.join(unknown)}",
                                fix=f"use families of: {', '.join(sorted(known)) or '(none installed)'}")
            wanted = [n for n in asset.config.families if not self.config.families or n in self.config.families]
            if not wanted:
                continue
            state = asset.materialize(states / asset.name)
            self.slots += [Slot(asset, family(name), state) for name in wanted]
        self.slots = interleaved(self.slots)
        missing = [n for n in self.config.families if n not in known]
        if missing or not self.slots:
            what = ", ".join(missing) or f"the assets list none of {self.config.families}"
            raise UserError(f"no family to synthesize: {what}",
                            fix=f"choose among {', '.join(sorted(known))}")
        if self.llm is not None:
            self.llm.check()

    async def run(self) -> SynthResult:
        self.out.mkdir(parents=True, exist_ok=True)
        save_resolved(self.config, self.out)
        with ExitStack() as stack:
            states = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="forge-synth-state-")))
            self.prepare(states)
            previous = self._resume()
            lines = stack.enter_context((self.out / CANDIDATES).open("a", encoding="utf-8"))
            manifest = None
            try:
                with map_os_errors(f"writing tasks and candidates under {self.out}"):
                    await self._propose(previous, lines)
                if self.config.build:
                    manifest = await self._build(lines)
                if self.config.calibrate is not None and self._kept():
                    await self._calibrate(manifest, lines)
            finally:
                report = synth_report(self, manifest)
                (self.out / "synth_report.json").write_text(json.dumps(report, indent=2, default=str))
        return SynthResult(self.out, list(self.candidates.values()), report, manifest)

    # -- proposing and filtering --------------------------------------------------------------

    async def _propose(self, previous: dict[str, dict[str, Any]], lines: Any) -> None:
        limit = self.config.max_proposals or 20 * self.config.n
        decided = {record["index"] for record in previous.values()}
        index = 0
        while self._kept() < self.config.n and index < limit:
            slot = self.slots[index % len(self.slots)]
            if index in decided:
                index += 1
                continue
            candidate = await off_loop(self._one, slot, index)
            self.candidates[candidate.id] = candidate
            lines.write(json.dumps(candidate.record(), default=str) + "\n")
            lines.flush()
            self.progress(candidate.decision, candidate)
            index += 1

    def _one(self, slot: Slot, index: int) -> Candidate:
        use_llm = self.llm is not None and (self.config.proposer == "llm" or index % 2 == 1)
        if use_llm:
            assert self.llm is not None
            if self.config.llm.mode == "freeform":
                slot = Slot(slot.asset, FreeformFamily(slot.family), slot.state)
            titles = [c.draft.title for c in self.candidates.values()
                      if c.decision == "kept" and c.family == slot.family.name and c.draft]
            candidate = self.llm.propose(slot, index, self.config.seed, titles)
        else:
            candidate = procedural(slot, index, self.config.seed)
        self.progress("proposed", candidate)
        if candidate.decision == "rejected" or not criticise(candidate, slot.family, slot.asset, slot.state):
            return candidate
        started = time.process_time()
        self._dedup_and_cap(candidate, slot)
        candidate.seconds["dedup"] = round(time.process_time() - started, 4)
        if candidate.decision != "rejected":
            path = write_task(candidate, slot.asset, self.out / "tasks",
                              proposer_model=self.config.llm.model if candidate.proposer.startswith("llm") else None)
            candidate.path, candidate.decision = str(path.relative_to(self.out)), "kept"
        return candidate

    def _dedup_and_cap(self, candidate: Candidate, slot: Slot) -> None:
        draft = candidate.draft
        assert draft is not None
        environment = {k: v for k, v in draft.files.items() if k.startswith("environment/")}
        candidate.task_sig = canonical_hash({"domain": slot.asset.domain, "asset": slot.asset.sha256,
                                             "family": slot.family.name,
                                             "params": slot.family.signature(candidate.params)})
        candidate.verifier_sig = canonical_hash({"spec": spec_json(draft.spec), "asset": slot.asset.sha256,
                                                 "environment": environment})
        for kind in ("task_sig", "verifier_sig"):
            same = self.signatures.get(getattr(candidate, kind))
            if same is not None:
                candidate.cluster = same
                candidate.reject(f"dedup.{kind}", f"the same task as {same} ({kind.replace('_', ' ')})")
                return
        near, similarity = self.near.duplicate_of(draft.instruction)
        if near is not None:
            candidate.cluster, candidate.max_jaccard = near, round(similarity, 4)
            candidate.reject("dedup.near", f"its instruction is {similarity:.2f} similar to {near}'s (char 5-gram "
                                           f"Jaccard >= {self.config.dedup_threshold})")
            return
        candidate.passed("dedup")
        key = (slot.family.name, slot.asset.name)
        if self.per_family[key] >= self.config.max_per_family_asset:
            limit = self.config.max_per_family_asset
            candidate.reject("cap", f"{limit} tasks of {key[0]} on {key[1]} are kept already")
            return
        candidate.passed("cap")
        candidate.max_jaccard = round(self.near.max_similarity(draft.instruction), 4)
        candidate.cluster = candidate.id
        self.per_family[key] += 1
        self.near.add(candidate.id, draft.instruction)
        self.signatures[candidate.task_sig] = self.signatures[candidate.verifier_sig] = candidate.id

    def _kept(self) -> int:
        return sum(c.decision == "kept" for c in self.candidates.values()) + self._resumed_kept

    # -- resume -----------------------------------------------------------------------------------

    def _resume(self) -> dict[str, dict[str, Any]]:
        path = self.out / CANDIDATES
        if not self.config.resume or not path.is_file():
            if path.is_file() and path.stat().st_size and not self.config.resume:
                raise UserError(f"{path} exists: {self.out} holds an earlier run",
                                fix="pass --resume to continue it, or another --out")
            return {}
        records: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                record = json.loads(line)
                records[record["id"]] = record
            except (ValueError, KeyError):
                log.warning("%s:%d: not a candidate record (cut short by an interruption?); skipped", path, number)
        for record in records.values():
            if record["decision"] != "kept":
                continue
            self._resumed_kept += 1
            self.near.add(record["id"], record["instruction"] or "")
            for kind in ("task_sig", "verifier_sig"):
                if record.get(kind):
                    self.signatures[record[kind]] = record["id"]
            self.per_family[(record["family"], record["asset"])] += 1
        self.resumed = records
        return records

    # -- build ------------------------------------------------------------------------------------

    async def _build(self, lines: Any) -> Path | None:
        """build-env on every kept task not built yet (this run's, and a resumed run's)."""
        records = {c.id: c.record() for c in self.candidates.values() if c.decision == "kept"}
        records.update({i: r for i, r in self.resumed.items() if r["decision"] == "kept" and not r.get("build")})
        if not records:
            return None
        settings = self.config.build_env.model_copy(update={
            "tasks": [str(self.out / r["path"]) for r in records.values()],
            "out_dir": str(self.out / "build-env"), "manifest": str(self.out / "manifest.jsonl")})
        report = await build_envs(settings, None)
        for outcome in report.outcomes:
            build = {"passed": outcome.passed, "stage": outcome.stage, "reason": outcome.reason, "image": outcome.image,
                     "seconds": round(outcome.seconds, 2), "rounds": len(outcome.rounds)}
            candidate = self.candidates.get(outcome.task)
            if candidate is not None:
                candidate.build = build
                if outcome.passed:
                    candidate.passed("build")
                else:
                    candidate.reject("build", f"build-env {outcome.stage}: {outcome.reason}"[:500])
                record = candidate.record()
                self.progress("built", candidate)
            elif outcome.task in self.resumed:
                record = self.resumed[outcome.task]
                record.update(build=build, stage="build" if outcome.passed else record["stage"])
                if not outcome.passed:
                    record.update(decision="rejected", rejected_at="build", reason_code="build",
                                  reason=f"build-env {outcome.stage}: {outcome.reason}"[:500])
            else:
                continue
            lines.write(json.dumps(record, default=str) + "\n")
            lines.flush()
        return report.manifest


    async def _calibrate(self, manifest: Path | None, lines: Any) -> None:
        """k rollouts of the reference harness on every published task (every written one without a
        build); pass@1 and pass@k into its record."""
        assert self.config.calibrate is not None
        tasks = [str(manifest)] if manifest is not None else [str(self.out / "tasks")]
        settings = self.config.calibrate.model_copy(update={"tasks": tasks,
                                                            "run_dir": str(self.out / "calibrate")})
        _, evaluation = await run_eval(settings, runtime=self.runtime)
        k = max(settings.ks)
        for harness in evaluation["harnesses"].values():
            for task, scores in harness["tasks"].items():
                record = self._record(task)
                if record is None or scores["n"] == 0:
                    continue
                learnable = 0 < (scores["pass@1"] or 0) < 1
                calibration = {"harness": settings.harnesses[0], "n": scores["n"], "pass@1": scores["pass@1"],
                               f"pass@{k}": scores[f"pass@{k}"], "learnable": learnable}
                record.update(stage="calibrate", calibration=calibration)
                if record["id"] in self.candidates:
                    self.candidates[record["id"]].passed("calibrate")
                    self.candidates[record["id"]].calibration = record["calibration"]
                if learnable:
                    _tag(self.out / record["path"], "learnable")
                lines.write(json.dumps(record, default=str) + "\n")
        lines.flush()

    def _record(self, task: str) -> dict[str, Any] | None:
        if task in self.candidates:
            return self.candidates[task].record()
        return self.resumed.get(task)


def _tag(task_dir: Path, tag: str) -> None:
    task = Task.load(task_dir)
    if tag not in task.config.metadata.tags:
        task.config.metadata.tags.append(tag)
        task.save()


async def synthesize(config: SynthConfig, progress: Progress | None = None,
                     runtime: Runtime | None = None) -> SynthResult:
    return await Synthesizer(config, progress, runtime).run()


def interleaved(slots: list[Slot]) -> list[Slot]:
    """The slots taken one asset at a time in turn (each asset's families in order), so the first few
    proposals already cover every asset instead of exhausting the first asset's families."""
    by_asset: dict[str, list[Slot]] = {}
    for slot in slots:
        by_asset.setdefault(str(slot.asset.root), []).append(slot)
    rounds = itertools.zip_longest(*by_asset.values())
    return [slot for turn in rounds for slot in turn if slot is not None]


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a daemon thread, awaited: the event loop stays free for Ctrl-C / SIGTERM while an LLM
    proposer waits for its model (a minute or more on CPU). An interrupt cancels the wait at once; the thread
    is left to finish unobserved (its candidate was not decided, so --resume proposes it again) and, being a
    daemon, does not hold up the exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # noqa: BLE001  (handed to the awaiting task)
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="forge-synth-propose", daemon=True).start()
    return await future
