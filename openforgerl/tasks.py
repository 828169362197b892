"""Task directories: Harbor-compatible layout plus openforgerl's own tables.

A task is a directory::

    task.toml          Harbor's tables ([metadata], [agent], [verifier], [environment], ...)
                       plus ours: [task] (name, domain), [provenance], [validation]
    instruction.md     what the agent is told
    environment/       Dockerfile + files (or [environment] docker_image pinned by digest)
    tests/test.sh      the verifier: writes /logs/verifier/reward.json {"reward": float, ...}
                       (or reward.txt holding one number)
    solution/solve.sh  the reference solution (the "oracle")

Invariant: loading then saving a task never loses a field, ours or Harbor's or unknown ones,
so Harbor/Terminal-Bench tasks round-trip unchanged. ``validate_task_dir`` reports *every*
problem as ``path: field: what is wrong: how to fix``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from openforgerl.errors import TaskFormatError

Domain = Literal["gui", "claw", "code"]

TASK_TOML = "task.toml"
INSTRUCTION = "instruction.md"
DOCKERFILE = "environment/Dockerfile"
TEST_SCRIPT = "tests/test.sh"
SOLUTION_SCRIPT = "solution/solve.sh"


class _Table(BaseModel):
    # Unknown keys are kept (and written back) so tasks from newer Harbor versions round-trip.
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class MetadataTable(_Table):
    """Harbor's [metadata]: free-form description of the task."""

    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)


class TaskTable(_Table):
    """Our [task]: identity and domain."""

    name: str | None = None
    """Task name; defaults to the directory name."""
    domain: Domain | None = None
    """gui (browser), claw (shell/files/services) or code (repo + tests)."""
    needed_actions: list[Literal["write", "read", "list", "search", "test", "run", "browse", "observe", "plan"]] = \
        Field(default_factory=list)
    """What the task needs the agent to do, as action kinds (see evaluation/actions.py), whatever its
    harness calls the tools: the behaviour report's needed_coverage."""


class AgentTable(_Table):
    """Harbor's [agent], plus ours: who the agent runs as and what system paths it may change."""

    timeout_sec: float = Field(600.0, gt=0)
    """Wall-clock limit for the agent phase; the whole process tree is killed after it."""
    user: str | None = None
    """The user the agent runs as: a name or ``uid[:gid]``. Unset: the image's unprivileged ``agent``
    user for our tasks; root for Harbor tasks that have no [task] table (Harbor's own default)."""
    writable_paths: list[str] = Field(default_factory=list)
    """System paths (absolute) the agent may change, e.g. ``/usr/local/lib/python3.11`` for a task that
    installs a package. Changes to other system paths end the rollout as tampered (reward 0)."""

    @field_validator("writable_paths")
    @classmethod
    def _inside_the_filesystem(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parts = PurePosixPath(path).parts
            if not path.startswith("/") or ".." in parts or len(parts) < 2:
                raise ValueError(f"{path!r} is not an absolute path below / (write e.g. /usr/local/lib/mytool)")
        return paths


class VerifierTable(_Table):
    """Harbor's [verifier]."""

    timeout_sec: float = Field(120.0, gt=0)
    """Wall-clock limit for tests/test.sh."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the verifier."""
    transcript: bool = False
    """Give the verifier the rollout's transcript: ``/logs/verifier/transcript.jsonl``, OpenClaw session
    events made by the orchestrator from the proxy's record of the model calls (for graders that read
    what the agent did, e.g. imported PinchBench / QwenClawBench tasks)."""
    judge: bool = False
    """The verifier asks the run's LLM judge (``judge.base_url`` of the run config), reached through the
    judge relay: ``FORGE_JUDGE_URL`` / ``FORGE_JUDGE_API_KEY`` are set for the verifier only."""


class EnvironmentTable(_Table):
    """Harbor's [environment]: how the sandbox is built and sized."""

    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    """A prebuilt image (pin it as name@sha256:...) instead of environment/Dockerfile."""
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    network: Literal["isolated", "bridge", "none"] | None = None
    """isolated (the default): no route out, only the proxy's model API reachable; bridge: the task needs
    the internet (a route out, still nothing of this host but the proxy); none: no network at all."""
    template: str | None = None
    """A base environment from openforgerl/templates/env (claw, code, gui) that build-env renders
    into environment/Dockerfile."""
    template_params: dict[str, Any] = Field(default_factory=dict)
    """Parameters of that template (packages, services, setup, ...)."""
    state_stores: list[str] = Field(default_factory=list)
    """Directories where the environment keeps its state (a web app's database, the mail spool): the
    verifier reads them, and the instruction need not name them (the agent changes them through the
    app or service, not as files)."""


class SourceAsset(_Table):
    """One reference asset a synthesized task came from."""

    path: str
    sha256: str

    @field_validator("sha256")
    @classmethod
    def _hex64(cls, value: str) -> str:
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value.lower()):
            raise ValueError("must be a 64-character hex sha256 digest")
        return value.lower()


class ProvenanceTable(_Table):
    """Our [provenance]: where a synthesized task came from."""

    sources: list[SourceAsset] = Field(default_factory=list)
    proposer_model: str | None = None
    prompt_hash: str | None = None
    dedup_cluster: str | None = None
    """Id of the MinHash cluster the task was kept from."""
    dedup_max_jaccard: float | None = Field(None, ge=0, le=1)
    """Highest Jaccard similarity to any other kept task."""


class ValidationTable(_Table):
    """Our [validation]: what ``forge build-env`` measured."""

    oracle_rewards: list[float] = Field(default_factory=list)
    nop_rewards: list[float] = Field(default_factory=list)
    failure_rewards: dict[str, list[float]] | None = None
    """Failure case (solution/failures/NAME.sh) -> its rewards; each must be at most nop_max."""
    passed: bool | None = None
    image: str | None = None
    image_digest: str | None = None
    date: str | None = None
    reason: str | None = None


class TaskConfig(_Table):
    """The whole task.toml."""

    version: str = "1.0"
    metadata: MetadataTable = Field(default_factory=MetadataTable)
    task: TaskTable = Field(default_factory=TaskTable)
    agent: AgentTable = Field(default_factory=AgentTable)
    verifier: VerifierTable = Field(default_factory=VerifierTable)
    environment: EnvironmentTable = Field(default_factory=EnvironmentTable)
    provenance: ProvenanceTable = Field(default_factory=ProvenanceTable)
    validation: ValidationTable = Field(default_factory=ValidationTable)


class Task(BaseModel):
    """A loaded task directory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    config: TaskConfig
    instruction: str

    @property
    def name(self) -> str:
        return self.config.task.name or self.path.name

    @property
    def domain(self) -> str | None:
        return self.config.task.domain

    @property
    def agent_user(self) -> str:
        """Who its agent runs as: ``[agent] user``, else the image's unprivileged ``agent`` for our tasks
        (they have a [task] table) and root for Harbor's (Harbor's own default)."""
        return self.config.agent.user or ("agent" if "task" in self.config.model_fields_set else "root")

    @property
    def dockerfile(self) -> Path:
        return self.path / DOCKERFILE

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @classmethod
    def load(cls, path: str | Path) -> Task:
        """Load and validate; raises TaskFormatError listing every problem."""
        path = Path(path)
        problems, config = _check(path)
        if problems:
            raise TaskFormatError(f"task {path} is invalid ({len(problems)} problem(s))", problems,
                                  fix="fix each problem listed")
        assert config is not None
        return cls(path=path, config=config, instruction=(path / INSTRUCTION).read_text(encoding="utf-8"))

    def save(self) -> None:
        """Write task.toml (only the fields that were set or loaded) and instruction.md."""
        save_task_config(self.path, self.config)
        (self.path / INSTRUCTION).write_text(self.instruction, encoding="utf-8")


def task_config_data(config: TaskConfig) -> dict[str, Any]:
    """What task.toml holds: loaded or assigned fields only, so nothing is invented on save.

    A table counts as set when it was loaded/assigned or when any field inside it was
    (``config.validation.passed = True`` must be saved even though ``validation`` was defaulted).
    """
    data = config.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, BaseModel) and name not in data:
            table = value.model_dump(mode="json", exclude_unset=True, exclude_none=True)
            if table:
                data[name] = table
    return data


def save_task_config(path: Path, config: TaskConfig) -> None:
    data = task_config_data(config)
    tmp = path / (TASK_TOML + ".tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    tmp.replace(path / TASK_TOML)


def validate_task_dir(path: str | Path) -> list[str]:
    """Every problem with the task directory, as ``path: field: what is wrong: how to fix``."""
    return _check(Path(path))[0]


def find_task_dirs(paths: list[str | Path]) -> list[Path]:
    """Expand each path: a task dir itself, or a directory whose children are task dirs."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / TASK_TOML).exists() or not path.is_dir():
            found.append(path)
            continue
        children = sorted(p for p in path.iterdir() if (p / TASK_TOML).exists())
        found.extend(children or [path])
    return found


def _check(path: Path) -> tuple[list[str], TaskConfig | None]:
    if not path.is_dir():
        return [f"{path}: -: not a directory: pass a task directory (one holding task.toml)"], None
    problems: list[str] = []
    config = _check_toml(path / TASK_TOML, problems)
    problems += _check_files(path, config)
    return problems, config


def _check_toml(toml_path: Path, problems: list[str]) -> TaskConfig | None:
    if not toml_path.is_file():
        problems.append(f"{toml_path}: -: missing: create it (an empty file is valid; see README 'Task format')")
        return None
    try:
        data: dict[str, Any] = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        problems.append(f"{toml_path}: -: not valid TOML ({exc}): fix the syntax at that position")
        return None
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "-"
            problems.append(f"{toml_path}: {field}: {err['msg']} (got {err.get('input')!r}): {_hint(field, err)}")
        return None


def _hint(field: str, err: Any) -> str:
    if field == "task.domain":
        return "set domain to one of gui, claw, code (or remove it)"
    if err["type"] == "extra_forbidden":
        return "remove the field"
    if err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        return f"write a value of the expected type for {field}"
    return f"correct {field}"


def _check_files(path: Path, config: TaskConfig | None) -> list[str]:
    problems = []
    instruction = path / INSTRUCTION
    if not instruction.is_file():
        problems.append(f"{instruction}: -: missing: write the instruction the agent is given")
    elif not instruction.read_text(encoding="utf-8", errors="replace").strip():
        problems.append(f"{instruction}: -: empty: write the instruction the agent is given")
    has_image = config is not None and (config.environment.docker_image or config.environment.template)
    if not has_image and not (path / DOCKERFILE).is_file():
        problems.append(f"{path / DOCKERFILE}: -: missing: add a Dockerfile, or set [environment] docker_image "
                        "or template")
    if not (path / TEST_SCRIPT).is_file():
        problems.append(f"{path / TEST_SCRIPT}: -: missing: add the verifier that writes "
                        "/logs/verifier/reward.json")
    return problems
