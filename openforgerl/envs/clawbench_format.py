"""The PinchBench / QwenClawBench task file: one Markdown file per task, read into a ``BenchTask``.

A task file is YAML front matter between ``---`` lines (``id``, ``name``, ``category``,
``grading_type`` automated | llm_judge | hybrid, ``grading_weights`` {automated, llm_judge},
``timeout_seconds``, ``workspace_files``: inline ``{path, content}`` or ``{source, dest}`` naming a
file in the benchmark's assets directory), then ``## `` sections: Prompt, Expected Behavior,
Grading Criteria (a ``- [ ]`` checklist), Automated Checks (a python block defining
``grade(transcript, workspace_path) -> dict``), LLM Judge Rubric.

The defaults are the benchmarks' own (``scripts/lib_tasks.py``, ``scripts/lib_grading.py`` of both):
grading_type automated, timeout 120 s, weights 0.5 / 0.5, the first python block is the grader,
the checklist stands in for a missing rubric. Invariant: ``parse_task`` either returns a task the
runner can grade exactly as the benchmark would, or raises one ``UserError`` naming the file, the
field and the fix.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from openforgerl.errors import UserError

GRADING_TYPES = ("automated", "llm_judge", "hybrid")
DEFAULT_TIMEOUT = 120
DEFAULT_WEIGHTS = {"automated": 0.5, "llm_judge": 0.5}
TRACING_KEYS = ("source_query", "source_line_number")
"""QwenClawBench front-matter fields that only trace where a task came from; its loader drops them
before parsing (they may hold text that is not valid YAML), and so does this one."""
QWENCLAWBENCH_KEYS = {"subcategory", "input_modality", "external_dependency", "verification_method"}
"""Front-matter fields only QwenClawBench tasks carry (how ``--benchmark auto`` tells the two apart)."""
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n(.*)$", re.DOTALL)
SECTION = re.compile(r"^##\s+(.+)$")
CHECKLIST = re.compile(r"^-\s+\[[ xX]\]\s+(.+)$")
PYTHON_BLOCK = re.compile(r"```python\s*(.*?)\s*```", re.DOTALL)
WHOLE_PYTHON_BLOCK = re.compile(r"```python\s*(.*)\s*```", re.DOTALL)


@dataclass
class WorkspaceFile:
    """One file placed in the agent's workspace: ``dest`` relative to it, from ``content`` or ``source``."""

    dest: str
    content: str | None = None
    source: Path | None = None


@dataclass
class BenchTask:
    """One benchmark task, as its benchmark reads it."""

    path: Path
    id: str
    name: str
    category: str
    grading_type: str
    timeout_seconds: float
    weights: dict[str, float]
    workspace: list[WorkspaceFile]
    prompt: str
    expected_behavior: str
    criteria: list[str]
    grade_source: str | None
    rubric: str | None
    grade_note: str | None = None
    """Set when the grader is not byte for byte what the benchmark runs, and why."""
    front_matter: dict[str, Any] = field(default_factory=dict)

    @property
    def has_judge_part(self) -> bool:
        return self.grading_type in ("llm_judge", "hybrid")

    @property
    def judge_rubric(self) -> str:
        """What the judge is shown: the task, what was expected and the rubric (the checklist when none)."""
        rubric = self.rubric or "\n".join(f"- {c}" for c in self.criteria)
        return (f"## Task given to the agent\n{self.prompt}\n\n## Expected Behavior\n{self.expected_behavior}\n\n"
                f"## Grading Rubric\n{rubric}\n\nJudge the agent's work as a whole against this rubric: PASS when "
                "it meets what the rubric asks for, FAIL when it falls short on any criterion.\n")


def parse_task(path: Path, assets: Path | None) -> BenchTask:
    """Read one task file; ``assets`` is the benchmark's assets directory (for ``source`` files)."""
    meta, body = _front_matter(path)
    sections = _sections(body)
    task_id = _task_id(path, meta)
    grading = _one_of(path, meta, "grading_type", GRADING_TYPES, "automated")
    prompt = sections.get("Prompt", "").strip()
    if not prompt:
        raise UserError(f"{path}: ## Prompt: missing or empty",
                        fix="write the message the agent is sent under '## Prompt'")
    criteria = [m.group(1) for line in sections.get("Grading Criteria", "").splitlines()
                if (m := CHECKLIST.match(line.strip()))]
    task = BenchTask(path=path, id=task_id, name=str(meta.get("name") or task_id),
                     category=str(meta.get("category") or ""), grading_type=grading,
                     timeout_seconds=_timeout(path, meta), weights=_weights(path, meta),
                     workspace=_workspace(path, meta, assets, task_id), prompt=prompt,
                     expected_behavior=sections.get("Expected Behavior", "").strip(), criteria=criteria,
                     grade_source=None, rubric=(sections.get("LLM Judge Rubric") or "").strip() or None,
                     front_matter=meta)
    if grading in ("automated", "hybrid"):
        task.grade_source, task.grade_note = _grade_source(path, sections.get("Automated Checks"))
    if task.has_judge_part and not task.rubric and not task.criteria:
        raise UserError(f"{path}: ## LLM Judge Rubric: missing (grading_type {grading} needs one)",
                        fix="add a '## LLM Judge Rubric' section or a '- [ ]' checklist under '## Grading Criteria'")
    return task


def _front_matter(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text", fix="save the task file as UTF-8") from None
    match = FRONT_MATTER.match(text)
    if not match:
        raise UserError(f"{path}: front matter: none (the file must start with a '---' line, YAML, and a '---' line)",
                        fix="put the task's id, grading_type, ... between two '---' lines at the top")
    raw, body = match.group(1), match.group(2)
    meta = _yaml(path, raw)
    if not isinstance(meta, dict):
        raise UserError(f"{path}: front matter: not a YAML mapping",
                        fix="write 'key: value' lines between the '---' lines")
    return meta, body


def _yaml(path: Path, raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as first:
        kept = [line for line in raw.splitlines() if not line.startswith(TRACING_KEYS)]
        try:
            return yaml.safe_load("\n".join(kept))  # without the tracing fields, as QwenClawBench reads it
        except yaml.YAMLError:
            where = getattr(first, "problem_mark", None)
            at = f" (line {where.line + 2})" if where is not None else ""
            problem = getattr(first, "problem", None) or str(first).splitlines()[0]
            raise UserError(f"{path}: front matter: not valid YAML{at}: {problem}",
                            fix="correct the YAML at that line (quote values that contain ': ' or start with '*')") \
                from None


def _sections(body: str) -> dict[str, str]:
    """``## Name`` -> its text, split exactly as the benchmarks split (a later duplicate wins)."""
    sections: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in body.split("\n"):
        match = SECTION.match(line)
        if match:
            if name:
                sections[name] = "\n".join(lines).strip()
            name, lines = match.group(1).strip(), []
        elif name:
            lines.append(line)
    if name:
        sections[name] = "\n".join(lines).strip()
    return sections


def _task_id(path: Path, meta: dict[str, Any]) -> str:
    task_id = meta.get("id")
    if not isinstance(task_id, str) or not ID_RE.match(task_id):
        raise UserError(f"{path}: id: {task_id!r} is not a task id",
                        fix="set 'id:' to letters, digits, '_', '.' or '-' (it names the task directory)")
    return task_id


def _one_of(path: Path, meta: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = meta.get(key, default)
    if value not in allowed:
        raise UserError(f"{path}: {key}: {value!r} is not one of {', '.join(allowed)}",
                        fix=f"set '{key}:' to {' | '.join(allowed)}")
    return str(value)


def _timeout(path: Path, meta: dict[str, Any]) -> float:
    value = meta.get("timeout_seconds", DEFAULT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UserError(f"{path}: timeout_seconds: {value!r} is not a positive number",
                        fix="set 'timeout_seconds:' to the agent's time limit in seconds, e.g. 120")
    return float(value)


def _weights(path: Path, meta: dict[str, Any]) -> dict[str, float]:
    raw = meta.get("grading_weights")
    if raw is None:
        return dict(DEFAULT_WEIGHTS)
    fix = "write grading_weights as 'automated: 0.4' and 'llm_judge: 0.6' (numbers >= 0)"
    if not isinstance(raw, dict):
        raise UserError(f"{path}: grading_weights: not a mapping", fix=fix)
    weights = {}
    for key, default in DEFAULT_WEIGHTS.items():
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"{path}: grading_weights.{key}: {value!r} is not a number >= 0", fix=fix)
        weights[key] = float(value)
    if sum(weights.values()) <= 0:  # both benchmarks fall back to equal weights then
        return dict(DEFAULT_WEIGHTS)
    return weights


def _workspace(path: Path, meta: dict[str, Any], assets: Path | None, task_id: str) -> list[WorkspaceFile]:
    raw = meta.get("workspace_files") or []
    if not isinstance(raw, list):
        raise UserError(f"{path}: workspace_files: not a list",
                        fix="list entries as '- path: x, content: ...' or '- source: x, dest: y'")
    files = []
    for index, entry in enumerate(raw):
        where = f"{path}: workspace_files[{index}]"
        if isinstance(entry, dict) and "content" in entry:
            dest = _relative(where + ".path", entry.get("path"))
            files.append(WorkspaceFile(dest, content="" if entry["content"] is None else str(entry["content"])))
        elif isinstance(entry, dict) and "source" in entry:
            dest = _relative(where + ".dest", entry.get("dest"))
            files.append(WorkspaceFile(dest, source=_asset(where, str(entry["source"]), assets, task_id)))
        else:
            raise UserError(f"{where}: {entry!r} is neither {{path, content}} nor {{source, dest}}",
                            fix="write '- path: x.txt' with 'content: |', or '- source: <asset>' with 'dest: <name>'")
    return files


def _relative(where: str, value: Any) -> str:
    parts = PurePosixPath(str(value)).parts if isinstance(value, str) and value.strip() else ()
    if not parts or value.startswith("/") or ".." in parts or "\\" in value:
        raise UserError(f"{where}: {value!r} is not a path inside the workspace",
                        fix="use a relative path without '..', e.g. data/input.csv")
    return str(PurePosixPath(*parts))


def _asset(where: str, source: str, assets: Path | None, task_id: str) -> Path:
    """QwenClawBench looks in assets/<task id>/ first, then assets/ (PinchBench's only place)."""
    if assets is None:
        raise UserError(f"{where}.source: {source!r} needs the benchmark's assets directory, and none was found",
                        fix="pass --assets DIR (the checkout's assets/ folder)")
    _relative(where + ".source", source)
    candidates = [assets / task_id / source, assets / source]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise UserError(f"{where}.source: {source!r} is not in {candidates[0].parent} or {assets}",
                    fix="pass --assets with the checkout's assets/ folder (git-lfs files must be pulled)")


def _grade_source(path: Path, section: str | None) -> tuple[str, str | None]:
    """The grader and, when it differs from what the benchmark runs, why.

    Both benchmarks take the first ```python block up to the first closing fence, so a grader holding
    a fence in a string is cut there and fails to compile (the benchmark scores it 0); such a grader is
    taken up to the section's last fence instead, and the note says so."""
    match = PYTHON_BLOCK.search(section or "")
    if not match:
        raise UserError(f"{path}: ## Automated Checks: no ```python block",
                        fix="put the grade(transcript, workspace_path) function in a ```python block under "
                            "'## Automated Checks' (or set grading_type: llm_judge)")
    source = match.group(1) + "\n"
    problem = _not_a_grader(source)
    if problem is None:
        return source, None
    whole = WHOLE_PYTHON_BLOCK.search(section or "")
    if whole and _not_a_grader(whole.group(1) + "\n") is None:
        return whole.group(1) + "\n", ("the benchmark cuts this grader at a ``` inside it and cannot run it (it "
                                       "scores 0 there); imported whole, up to the section's last ```")
    raise UserError(f"{path}: ## Automated Checks: {problem}",
                    fix="make the block valid Python 3 defining 'def grade(transcript: list, workspace_path: str)'")


def _not_a_grader(source: str) -> str | None:
    try:
        tree = ast.parse(source, filename="Automated Checks")
    except SyntaxError as exc:
        return f"line {exc.lineno} of the python block: {exc.msg}"
    if not any(isinstance(node, ast.FunctionDef) and node.name == "grade" for node in tree.body):
        return "the python block defines no grade() function"
    return None


def foreign_imports(source: str) -> list[str]:
    """Top-level modules the grader imports that are not in Python's standard library."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return sorted(roots - set(sys.stdlib_module_names))
