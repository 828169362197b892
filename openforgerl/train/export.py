"""Recorded trajectories -> training rows on disk, JSONL or parquet: one row per segment.

Two row shapes. ``export_trajectories`` writes the proxy's record as it is (prompt and response ids,
response mask, logprobs). ``export_sft`` reads ``forge rollout`` / ``forge eval`` run directories and
writes SFT rows: ``input_ids`` and ``loss_mask`` for ``ForgeSFTDataset`` (veRL's SFT trainer) plus a
chat ``messages`` form for trainers that want text; rejection sampling (``rs``) keeps only the rollouts
whose reward reaches a threshold.

Invariant: a row's ids are exactly the segment the proxy recorded (no re-tokenisation):
``input_ids == prompt_ids + response_ids`` and ``loss_mask == [0] * len(prompt_ids) + response_mask``,
so only model-sampled tokens are trained on (never the prompt, tool results, template glue, or tokens the
proxy forced). Reward, status and metadata ride on every row of a rollout.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from openforgerl.errors import ForgeError, UserError
from openforgerl.rollout.trajectory import CallRecord, Segment, Trajectory

if TYPE_CHECKING:
    from openforgerl.evaluation.report_viewer import Decoder
    from openforgerl.evaluation.runs import RunData

SUFFIXES = (".jsonl", ".parquet")
PARQUET_HINT = 'pip install "openforgerl[parquet]"'


def _check_suffix(path: Path) -> None:
    if path.suffix not in SUFFIXES:
        raise UserError(f"cannot export to {path.name}", fix="name the output file *.jsonl or *.parquet")


def export_trajectories(trajectories: list[Trajectory], path: Path) -> Path:
    """Write ``trajectories`` to ``path``, as JSONL or parquet by its suffix."""
    _check_suffix(path)
    return export_jsonl(trajectories, path) if path.suffix == ".jsonl" else export_parquet(trajectories, path)


def export_jsonl(trajectories: list[Trajectory], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        for trajectory in trajectories:
            for row in trajectory.rows():
                out.write(json.dumps(row) + "\n")
    return path


def _pyarrow() -> tuple[Any, Any]:
    try:
        # pyarrow ships no type stubs or py.typed marker (pyarrow-stubs is not a dependency).
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UserError("parquet export needs pyarrow", fix=PARQUET_HINT) from exc
    return pa, pq


def export_parquet(trajectories: list[Trajectory], path: str | Path) -> Path:
    pa, pq = _pyarrow()
    rows = [dict(row, metadata=json.dumps(row["metadata"]), timings=json.dumps(row["timings"]))
            for t in trajectories for row in t.rows()]
    schema = pa.schema([("rollout_id", pa.string()), ("segment", pa.int32()),
                        ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
                        ("response_mask", pa.list_(pa.int8())), ("logprobs", pa.list_(pa.float32())),
                        ("calls", pa.list_(pa.int32())), ("reward", pa.float64()),
                        ("status", pa.string()), ("metadata", pa.string()), ("timings", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return Path(path)


# --- SFT and rejection-sampling export of run directories -------------------------------------------------

ExportKind = Literal["sft", "rs"]
EXPORTED_STATUSES = ("success", "failure")
"""The agent ran to its end and was verified. Timeouts, infra and verifier errors say nothing about the policy."""
RS_MIN_REWARD = 1.0
DecoderFor = Callable[[str], "Decoder"]

CALL_FIELDS = frozenset({"index", "status", "kind", "segment", "finish", "dialect", "error", "digest"})
CHATML_TURN = re.compile(r"<\|im_start\|>([A-Za-z_]+)\n?(.*?)(?:<\|im_end\|>\n?|(?=<\|im_start\|>)|\Z)", re.S)


def trajectory_from_saved(saved: dict[str, Any]) -> Trajectory:
    """A trajectory file a run saved (``Trajectory.to_dict()``) back as a ``Trajectory``.

    Its calls come back as summaries (status, kind, telemetry, digest) without ids: the segments hold them."""
    calls = [CallRecord(index=c["index"], status=c["status"], kind=c["kind"], segment=c["segment"],
                        finish=c.get("finish", ""), dialect=c.get("dialect", ""), error=c.get("error", ""),
                        digest=c.get("digest"), telemetry={k: v for k, v in c.items() if k not in CALL_FIELDS})
             for c in saved.get("calls", [])]
    segments = [Segment(prompt_ids=list(s["prompt_ids"]), response_ids=list(s["response_ids"]),
                        response_mask=list(s["response_mask"]), logprobs=list(s["logprobs"]),
                        calls=list(s.get("calls", []))) for s in saved.get("segments", [])]
    return Trajectory(rollout_id=saved["id"], metadata=saved.get("metadata") or {}, status=saved.get("status", ""),
                      reward=saved.get("reward"), segments=segments, calls=calls, truncated=saved.get("truncated"))


def chat_messages(text: str) -> list[dict[str, str]] | None:
    """ChatML text (``<|im_start|>role\\n...<|im_end|>``, the layout of the templates we serve) as chat
    messages; None when ``text`` is not ChatML. Tool calls and results stay in the content as the
    template wrote them (``<tool_call>``, ``<tool_response>``)."""
    turns = [{"role": role, "content": content} for role, content in CHATML_TURN.findall(text)]
    return turns or None


@dataclass
class SFTExport:
    """What ``export_sft`` wrote, and what it left out and why."""

    path: Path
    rollouts: int = 0
    rows: int = 0
    seen: int = 0
    left_out: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def left_out_line(self) -> str | None:
        """One line: how many rollouts were not exported, by reason; None when none was left out."""
        if not self.left_out:
            return None
        reasons = ", ".join(f"{count} {why}" for why, count in self.left_out.most_common())
        return f"left out {self.left_out.total()} of {self.seen} rollouts: {reasons}"


def why_left_out(result: dict[str, Any], min_reward: float | None) -> str | None:
    """Why the rollout of ``result`` (a rollouts.jsonl line) is not exported; None when it is."""
    status = str(result.get("status"))
    if status not in EXPORTED_STATUSES:
        return status
    reward = result.get("reward")
    if min_reward is not None and (reward is None or reward < min_reward):
        return f"reward below {min_reward:g}"
    return None if result.get("trajectory") else "no trajectory (no model calls)"


class _Messages:
    """Segment ids -> chat messages with each model's tokenizer, loaded once; a note when there is none."""

    def __init__(self, decoder_for: DecoderFor, notes: list[str]) -> None:
        self.decoder_for, self.notes = decoder_for, notes
        self.decoders: dict[str, Decoder | None] = {}

    def __call__(self, model: str, segment: Segment) -> list[dict[str, str]] | None:
        if model not in self.decoders:
            self.decoders[model] = self._load(model)
        decoder = self.decoders[model]
        if decoder is None:
            return None
        messages = chat_messages(decoder.decode(segment.ids(), False))
        if messages is None:
            self._give_up(model, "its chat template is not ChatML")
        return messages

    def _load(self, model: str) -> Decoder | None:
        if not model:
            self._give_up(model, "the run does not name its model")
            return None
        try:
            return self.decoder_for(model)
        except (ForgeError, ImportError, OSError, ValueError) as exc:
            self._give_up(model, str(exc))
            return None

    def _give_up(self, model: str, why: str) -> None:
        self.decoders[model] = None
        self.notes.append(f"messages left out for model {model or '-'}: {why}")


MessagesOf = Callable[[Segment], list[dict[str, str]] | None]


def sft_rows(trajectory: Trajectory, messages_of: MessagesOf | None = None) -> list[dict[str, Any]]:
    """One SFT row per segment of ``trajectory``; ``messages_of(segment)`` gives its chat form (else None)."""
    task = str(trajectory.metadata.get("task", ""))
    return [{"rollout_id": trajectory.rollout_id, "segment": i, "task": task, "input_ids": segment.ids(),
             "loss_mask": [0] * len(segment.prompt_ids) + segment.response_mask,
             "prompt_length": len(segment.prompt_ids),
             "messages": messages_of(segment) if messages_of else None,
             "reward": trajectory.reward, "status": trajectory.status, "metadata": trajectory.metadata}
            for i, segment in enumerate(trajectory.segments)]


def export_sft(run_dirs: Iterable[str | Path], path: str | Path, kind: ExportKind = "sft",
               min_reward: float | None = None, decoder_for: DecoderFor | None = None) -> SFTExport:
    """Write SFT rows of the rollouts in ``run_dirs`` (forge rollout or forge eval directories) to ``path``.

    ``sft`` keeps every rollout that ended in success or failure; ``rs`` (rejection sampling) only those
    whose reward is at least ``min_reward`` (default 1.0); both keep every segment of a kept rollout, and
    ``min_reward`` filters ``sft`` too when given. Status and reward come from rollouts.jsonl (the run's
    final word). ``decoder_for(model)`` is the tokenizer the ``messages`` form is decoded with (default: the
    pulled policy's)."""
    from openforgerl.evaluation.report_viewer import load_decoder

    path = Path(path)
    _check_suffix(path)
    if kind == "rs" and min_reward is None:
        min_reward = RS_MIN_REWARD
    runs = [_exportable_run(Path(d)) for d in run_dirs]
    export = SFTExport(path)
    messages = _Messages(decoder_for or load_decoder, export.notes)
    rows: list[dict[str, Any]] = []
    for run in runs:
        for result in run.results:
            export.seen += 1
            kept, why = _rollout_rows(run, result, min_reward, messages)
            if why:
                export.left_out[why] += 1
            else:
                export.rollouts += 1
                rows += kept
    if not rows:
        raise UserError(f"nothing to export from {', '.join(str(r.path) for r in runs)}: {export.left_out_line()}",
                        fix="lower --min-reward" if any(w.startswith("reward") for w in export.left_out)
                        else "export runs that have rollouts ending in success or failure")
    export.rows = len(rows)
    write_sft_rows(rows, path)
    return export


def _exportable_run(path: Path) -> RunData:
    from openforgerl.evaluation.runs import load_run

    run = load_run(path)
    if not any(result.get("trajectory") for result in run.results):
        raise UserError(f"{path} holds no trajectories (none of its {len(run.results)} rollouts saved one)",
                        fix="export a forge rollout or forge eval run whose harness called the model through "
                            "the forge proxy (its rollouts.jsonl lines name trajectories/<id>.json)")
    return run


def _rollout_rows(run: RunData, result: dict[str, Any], min_reward: float | None,
                  messages: _Messages) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of one rollout, or why it has none."""
    why = why_left_out(result, min_reward)
    if why:
        return [], why
    saved = run.trajectory(result)
    if saved is None:
        return [], "trajectory unreadable"
    trajectory = trajectory_from_saved(saved)
    if not trajectory.segments:
        return [], "no segments (every model call failed)"
    trajectory.status, trajectory.reward = str(result["status"]), result.get("reward")
    rollout_run = run.run_of(result)
    model = str(trajectory.metadata.get("model") or (rollout_run.config.get("model") if rollout_run else "") or "")
    return sft_rows(trajectory, lambda segment: messages(model, segment)), None


def write_sft_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """``sft_rows`` to ``path``: JSONL (metadata as an object) or parquet (metadata as a JSON string)."""
    _check_suffix(path)
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
        return path
    pa, pq = _pyarrow()
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("rollout_id", pa.string()), ("segment", pa.int32()), ("task", pa.string()),
                        ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
                        ("prompt_length", pa.int32()), ("messages", pa.list_(message)),
                        ("reward", pa.float64()), ("status", pa.string()), ("metadata", pa.string())])
    table = pa.Table.from_pylist([dict(row, metadata=json.dumps(row["metadata"])) for row in rows], schema=schema)
    pq.write_table(table, path)
    return path
