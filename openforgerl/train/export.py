"""Recorded trajectories -> training rows on disk: one row per segment, JSONL or parquet.

Invariant: a row's ``prompt_ids + response_ids`` is exactly the segment the proxy recorded (no
re-tokenisation); reward, status, metadata and timings ride on every row of a rollout.
"""

from __future__ import annotations

import json
from pathlib import Path

from openforgerl.errors import UserError
from openforgerl.rollout.trajectory import Trajectory


def export_trajectories(trajectories: list[Trajectory], path: Path) -> Path:
    """Write ``trajectories`` to ``path``, as JSONL or parquet by its suffix."""
    if path.suffix == ".jsonl":
        return export_jsonl(trajectories, path)
    if path.suffix == ".parquet":
        return export_parquet(trajectories, path)
    raise UserError(f"cannot export to {path.name}", fix="name the output file *.jsonl or *.parquet")


def export_jsonl(trajectories: list[Trajectory], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as out:
        for trajectory in trajectories:
            for row in trajectory.rows():
                out.write(json.dumps(row) + "\n")
    return path


def export_parquet(trajectories: list[Trajectory], path: str | Path) -> Path:
    try:
        # pyarrow ships no type stubs or py.typed marker (pyarrow-stubs is not a dependency).
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UserError("parquet export needs pyarrow", fix='pip install "openforgerl[parquet]"') from exc
    rows = [dict(row, metadata=json.dumps(row["metadata"]), timings=json.dumps(row["timings"]))
            for t in trajectories for row in t.rows()]
    schema = pa.schema([("rollout_id", pa.string()), ("segment", pa.int32()),
                        ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
                        ("response_mask", pa.list_(pa.int8())), ("logprobs", pa.list_(pa.float32())),
                        ("calls", pa.list_(pa.int32())), ("reward", pa.float64()),
                        ("status", pa.string()), ("metadata", pa.string()), ("timings", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return Path(path)
