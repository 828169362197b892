"""Published tasks -> veRL's RLHFDataset rows (parquet or JSONL), one row per (task, harness).

A row is what ``ForgeAgentLoop.run`` receives: ``prompt`` holds the task instruction as a user
message (veRL shows it as ``raw_prompt``; the harness reads the instruction from the task itself),
``agent_name`` selects the agent loop, ``extra_info.forge`` says which task to run with which harness.
Key invariant: every row has the same Arrow schema — the task spec travels as one JSON string
(``extra_info.forge``), never as a struct whose fields would differ between harnesses or tasks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforgerl.errors import UserError
from openforgerl.manifest import published
from openforgerl.rollout.harnesses import validate_harness_options
from openforgerl.tasks import Task, find_task_dirs

FORGE_KEY = "forge"
"""The ``extra_info`` key holding a row's task spec (a JSON string)."""
REWARD_STYLE = "forge"
"""``reward_model.style``: the reward comes from the task's verifier, run by the agent loop."""


@dataclass(frozen=True)
class TaskSpec:
    """What one row asks the agent loop to run."""

    task: str
    path: str
    harness: str
    harness_options: dict[str, Any]
    image: str | None = None
    """The image the manifest published (pinned by digest); the agent loop refuses a task that moved on."""

    def to_json(self) -> str:
        return json.dumps({"task": self.task, "path": self.path, "harness": self.harness,
                           "harness_options": self.harness_options, "image": self.image}, sort_keys=True)

    @classmethod
    def from_extra_info(cls, extra_info: Mapping[str, Any] | None) -> TaskSpec:
        raw = (extra_info or {}).get(FORGE_KEY)
        if not raw:
            raise UserError(f"a dataset row has no extra_info.{FORGE_KEY}: it was not made by forge",
                            fix="build the dataset with export_verl_dataset (forge train export-verl)")
        data = json.loads(raw) if isinstance(raw, str) else dict(raw)
        return cls(task=data["task"], path=data["path"], harness=data["harness"],
                   harness_options=dict(data.get("harness_options") or {}), image=data.get("image"))


def export_verl_dataset(source: str | Path, out_path: str | Path, harness: str | Sequence[str] = "react",
                        harness_options: Mapping[str, Any] | None = None,
                        agent_name: str = "forge_agent") -> Path:
    """Write veRL rows for the tasks of ``source`` (a build-env manifest.jsonl, a task dir, or a dir
    of task dirs) to ``out_path`` (``.parquet`` or ``.jsonl``).

    ``harness`` may name several harnesses: each task then gets one row per harness (a multi-harness
    dataset). ``harness_options`` applies to every harness, or, when each of its keys is one of the
    listed harnesses, maps a harness to its own options."""
    harnesses = [harness] if isinstance(harness, str) else list(harness)
    if not harnesses:
        raise UserError("no harness to export rows for", fix="name at least one harness")
    options = _options_by_harness(harnesses, harness_options or {})
    tasks = _published(Path(source))
    if not tasks:
        raise UserError(f"no tasks in {source}", fix="pass a manifest.jsonl, a task directory or a directory of them")
    group = _group_name(Path(source))
    rows = [_row(len(harnesses) * i + j, task, image, name, options[name], agent_name, group)
            for i, (task, image) in enumerate(tasks) for j, name in enumerate(harnesses)]
    return _write(rows, Path(out_path))


def _options_by_harness(harnesses: list[str], options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    per_harness = bool(options) and len(harnesses) > 1 and set(options) <= set(harnesses) and all(
        isinstance(value, Mapping) for value in options.values())
    chosen = {name: dict(options.get(name) or {}) if per_harness else dict(options) for name in harnesses}
    for name, values in chosen.items():
        validate_harness_options(name, values)  # a typo fails now, not in every rollout of a training run
    return chosen


def _published(source: Path) -> list[tuple[Task, str | None]]:
    """(task, published image) pairs: a manifest's latest entry per task (checked to still pin its
    image, as ``forge rollout`` does), or task directories with the image their task.toml pins."""
    if source.suffix == ".jsonl" and source.is_file():
        return list(published(source))
    return [(task, task.config.environment.docker_image) for task in map(Task.load, find_task_dirs([source]))]


def _group_name(source: Path) -> str:
    """What ``data_source`` says when a task declares no domain: the manifest's (or tasks') directory."""
    directory = source.parent if source.is_file() else source
    return directory.resolve().name or "tasks"


def _row(index: int, task: Task, image: str | None, harness: str, options: dict[str, Any], agent_name: str,
         group: str) -> dict[str, Any]:
    spec = TaskSpec(task=task.name, path=str(task.path.resolve()), harness=harness, harness_options=options,
                    image=image)
    return {"data_source": f"openforgerl/{task.domain or group}", "agent_name": agent_name,
            "prompt": [{"role": "user", "content": task.instruction}], "ability": "agent",
            "reward_model": {"style": REWARD_STYLE, "ground_truth": ""},
            "extra_info": {"index": index, FORGE_KEY: spec.to_json()}}


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        return path
    if path.suffix != ".parquet":
        raise UserError(f"cannot write a veRL dataset to {path.name}", fix="name it *.parquet or *.jsonl")
    try:
        import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UserError("writing parquet needs pyarrow", fix='pip install "openforgerl[train]"') from exc
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("data_source", pa.string()), ("agent_name", pa.string()), ("prompt", pa.list_(message)),
                        ("ability", pa.string()),
                        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
                        ("extra_info", pa.struct([("index", pa.int64()), (FORGE_KEY, pa.string())]))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path
