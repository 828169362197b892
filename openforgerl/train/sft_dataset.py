"""veRL's SFT trainer on a ``forge export sft|rs`` file, token for token.

veRL 0.9.1 (``verl/trainer/sft_trainer.py``, ``create_sft_dataset``) builds any dataset class named by
``data.custom_cls.path=pkg://openforgerl.train.sft_dataset data.custom_cls.name=ForgeSFTDataset`` as
``cls(parquet_files=..., tokenizer=..., config=data, processor=..., max_samples=...)``. Its default
``MultiTurnSFTDataset`` re-tokenises chat messages; this one reads the recorded ids instead.

Invariant: an item's ``input_ids`` are the exported row's ids exactly, and its ``loss_mask`` the row's
(0 on the prompt, tool results, template glue and forced tokens, 1 on model-sampled tokens), unshifted:
veRL's ``sft_loss`` shifts it by one itself. Only truncation to ``data.max_length`` (when
``data.truncation`` is ``left`` or ``right``) and, in ``right`` pad mode, padding change them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from openforgerl.errors import UserError

PAD_MODES = ("no_padding", "right")
"""What veRL's SFT collate takes from a dataset of this shape (its engines in 0.9.1 train only no_padding)."""
TRUNCATIONS = ("error", "left", "right")
COLUMNS = ("input_ids", "loss_mask")
EXPORT_FIX = "point data.train_files at a file forge export sft|rs wrote (*.parquet or *.jsonl)"

Row = tuple[list[int], list[int]]


class ForgeSFTDataset(Dataset[dict[str, torch.Tensor]]):
    """Rows of ``forge export`` files as veRL SFT items: ``input_ids``, ``position_ids``, ``loss_mask``
    (and ``attention_mask`` in ``right`` pad mode), each a 1-D ``torch.long`` tensor.

    Config keys read (veRL's ``data`` section): ``pad_mode`` (no_padding | right, default no_padding),
    ``max_length`` (default 1024), ``truncation`` (error | left | right, default error: a longer row is
    refused here, before training starts), ``shuffle`` and ``seed`` (which rows ``max_samples`` keeps)."""

    def __init__(self, parquet_files: str | os.PathLike[str] | list[str], tokenizer: Any, config: Any = None,
                 processor: Any = None, max_samples: int = -1) -> None:
        config = config if config is not None else {}
        self.pad_mode = str(config.get("pad_mode", "no_padding"))
        self.truncation = str(config.get("truncation", "error"))
        self.max_length = int(config.get("max_length", 1024))
        _check_choice("data.pad_mode", self.pad_mode, PAD_MODES,
                      "set data.pad_mode=no_padding (veRL 0.9.1's SFT engines train only no_padding)")
        _check_choice("data.truncation", self.truncation, TRUNCATIONS, "set data.truncation=error, left or right")
        self.pad_token_id = getattr(tokenizer, "pad_token_id", None) or 0
        files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else list(parquet_files)
        self.rows: list[Row] = []
        for file in map(Path, files):
            rows = read_rows(file)
            if self.truncation == "error":
                _check_lengths(file, rows, self.max_length)
            self.rows += rows
        if not self.rows:
            raise UserError(f"no rows in {', '.join(map(str, files))}", fix=EXPORT_FIX)
        self.rows = _sample(self.rows, max_samples, bool(config.get("shuffle", False)), config.get("seed"))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids, mask = self._truncated(*self.rows[index])
        item = {"input_ids": torch.tensor(ids, dtype=torch.long),
                "position_ids": torch.arange(len(ids), dtype=torch.long),
                "loss_mask": torch.tensor(mask, dtype=torch.long)}
        return item if self.pad_mode == "no_padding" else self._right_padded(item)

    def _truncated(self, ids: list[int], mask: list[int]) -> Row:
        if len(ids) <= self.max_length:
            return ids, mask
        if self.truncation == "left":
            return ids[-self.max_length:], mask[-self.max_length:]
        return ids[:self.max_length], mask[:self.max_length]

    def _right_padded(self, item: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        pad = self.max_length - len(item["input_ids"])
        attention_mask = torch.ones(len(item["input_ids"]), dtype=torch.long)
        return {"input_ids": torch.nn.functional.pad(item["input_ids"], (0, pad), value=self.pad_token_id),
                "attention_mask": torch.nn.functional.pad(attention_mask, (0, pad)),
                "position_ids": torch.nn.functional.pad(item["position_ids"], (0, pad)),
                "loss_mask": torch.nn.functional.pad(item["loss_mask"], (0, pad))}


def read_rows(path: Path) -> list[Row]:
    """(input_ids, loss_mask) of every row of a ``forge export`` file, checked to be of equal length."""
    if not path.is_file():
        raise UserError(f"{path} is not a file", fix=EXPORT_FIX)
    columns = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    rows = list(zip(*(columns[name] for name in COLUMNS), strict=True))
    for number, (ids, mask) in enumerate(rows, 1):
        if len(ids) != len(mask):
            raise UserError(f"{path}: row {number} has {len(ids)} input_ids but {len(mask)} loss_mask values",
                            fix=EXPORT_FIX)
    return rows


def _read_parquet(path: Path) -> dict[str, list[list[int]]]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    missing = [name for name in COLUMNS if name not in pq.read_schema(path).names]
    if missing:
        raise UserError(f"{path} has no {' or '.join(missing)} column: not a forge export", fix=EXPORT_FIX)
    table = pq.read_table(path, columns=list(COLUMNS))
    return {name: table.column(name).to_pylist() for name in COLUMNS}


def _read_jsonl(path: Path) -> dict[str, list[list[int]]]:
    columns: dict[str, list[list[int]]] = {name: [] for name in COLUMNS}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                for name in COLUMNS:
                    columns[name].append(list(row[name]))
            except (ValueError, KeyError, TypeError) as exc:
                raise UserError(f"{path}:{number}: not a forge export row ({type(exc).__name__}: {exc})",
                                fix=EXPORT_FIX) from exc
    return columns


def _check_choice(key: str, value: str, choices: tuple[str, ...], fix: str) -> None:
    if value not in choices:
        raise UserError(f"{key}={value} is not supported by ForgeSFTDataset (it takes {', '.join(choices)})", fix=fix)


def _check_lengths(path: Path, rows: list[Row], max_length: int) -> None:
    too_long = [(number, len(ids)) for number, (ids, _) in enumerate(rows, 1) if len(ids) > max_length]
    if too_long:
        longest = max(length for _, length in too_long)
        raise UserError(f"{path}: {len(too_long)} row(s) longer than data.max_length={max_length} (row "
                        f"{too_long[0][0]}: {too_long[0][1]} tokens)",
                        fix=f"raise data.max_length to {longest} or set data.truncation=left or right")


def _sample(rows: list[Row], max_samples: int, shuffle: bool, seed: Any) -> list[Row]:
    """At most ``max_samples`` rows (all when it is not positive): the first ones, or a seeded random choice."""
    if max_samples <= 0 or max_samples >= len(rows):
        return rows
    if not shuffle:
        return rows[:max_samples]
    generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    return [rows[i] for i in torch.randperm(len(rows), generator=generator)[:max_samples].tolist()]
