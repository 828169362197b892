"""Shared pieces of the claw families: reading the workspace, shell-safe verifier commands, host effects.

A claw verifier that needs more than a file/JSON comparison is a ``command`` check running a small
stdlib Python program (``python3 -I -S - ARGS <<'PY'``: nothing the agent planted is imported)
whose container paths are prefixed with ``$FORGE_ROOT`` (empty in the container, the root directory
on the host dry run). Invariant: every program and argument here is fixed text plus JSON of the
family's parameters, so the same parameters always give byte-identical specs, and nothing depends on
the clock or the host.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from openforgerl.synth.family import Effect

NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
MAX_FAILURE_CASES = 3
"""Failure cases kept per task: each costs one verifier run in the dry run (the families list theirs
strongest first)."""
NOT_MEASURES = {"year", "isbn", "sku", "id", "zip"}
"""Numeric-looking columns that are labels, not quantities (summing years means nothing)."""


def host(root: Path, container_path: str) -> Path:
    """Where a container path lies on the host under ``root`` (the sandbox's /)."""
    return root / container_path.lstrip("/")


def shell_path(container_path: str) -> str:
    """A shell word for a container path that also works on the host dry run."""
    return f'"$FORGE_ROOT{container_path}"'


def python_check(name: str, program: str, *words: str) -> dict[str, Any]:
    """A ``command`` check: ``python3 -I -S - WORDS`` reading PROGRAM from a quoted here-document
    (``words`` are shell words already). A here-document, not ``-c``: build-env's dependency check reads
    each line of a multi-line ``-c`` string as a command the image must have."""
    if "\nPY\n" in f"\n{program}\n":
        raise ValueError("a verifier program must not hold a line PY (it would end its own here-document)")
    command = " ".join(["python3", "-I", "-S", "-", *words]) + f" <<'PY'\n{program.rstrip()}\nPY"
    return {"type": "command", "name": name, "command": command}


def json_word(value: Any) -> str:
    """``value`` as canonical JSON, quoted as one shell word."""
    return shlex.quote(json.dumps(value, sort_keys=True, separators=(",", ":")))


def write_file(root: Path, container_path: str, text: str) -> None:
    target = host(root, container_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def json_writer(container_path: str, value: Any) -> Effect:
    """An effect that writes ``value`` as JSON at ``container_path`` (as the solution would)."""
    def effect(root: Path) -> None:
        write_file(root, container_path, json.dumps(value, indent=2) + "\n")
    return effect


def text_writer(container_path: str, text: str) -> Effect:
    def effect(root: Path) -> None:
        write_file(root, container_path, text)
    return effect


def strongest(failures: dict[str, Effect], *order: str) -> dict[str, Effect]:
    """At most ``MAX_FAILURE_CASES`` of ``failures``, those named in ``order`` first."""
    names = [n for n in order if n in failures] + [n for n in failures if n not in order]
    return {name: failures[name] for name in names[:MAX_FAILURE_CASES]}


def both(*effects: Effect) -> Effect:
    def effect(root: Path) -> None:
        for each in effects:
            each(root)
    return effect


# ---- CSV sheets --------------------------------------------------------------------------------

class Sheet:
    """A CSV file of the workspace: its header, rows and what kind of column each one is."""

    def __init__(self, container_path: str, text: str) -> None:
        self.path = container_path
        reader = csv.reader(io.StringIO(text))
        rows = [row for row in reader if row]
        self.header, self.rows = (rows[0], rows[1:]) if rows else ([], [])
        self.records = [dict(zip(self.header, row, strict=False)) for row in self.rows]

    def values(self, column: str) -> list[str]:
        return [record.get(column, "") for record in self.records]

    def is_numeric(self, column: str) -> bool:
        values = self.values(column)
        return bool(values) and all(NUMBER.match(v) for v in values)

    def is_integer(self, column: str) -> bool:
        return self.is_numeric(column) and all("." not in v for v in self.values(column))

    @property
    def measures(self) -> list[str]:
        """Numeric columns that are quantities (amounts, counts, prices)."""
        return [c for c in self.header if self.is_numeric(c) and c.lower() not in NOT_MEASURES]

    @property
    def groups(self) -> list[str]:
        """Text columns with a few repeated values: what rows can be grouped or filtered by."""
        return [c for c in self.header if not self.is_numeric(c) and 2 <= len(set(self.values(c))) <= 8
                and c != "date"]

    @property
    def months(self) -> list[str]:
        """Months (YYYY-MM) of a ``date`` column of ISO dates; empty without one."""
        dates = self.values("date") if "date" in self.header else []
        if not dates or not all(re.match(r"^\d{4}-\d{2}-\d{2}$", d) for d in dates):
            return []
        return sorted({d[:7] for d in dates})

    def typed(self, column: str, value: str) -> Any:
        """A cell as JSON would hold it: integers and decimals of numeric columns as numbers."""
        if column in self.header and self.is_numeric(column):
            return int(value) if self.is_integer(column) else float(value)
        return value


def sheets(state: Path) -> dict[str, Sheet]:
    """Every CSV under the workspace's /app with a header and at least five rows, by container path."""
    found: dict[str, Sheet] = {}
    for path in sorted((state / "app").rglob("*.csv")):
        sheet = Sheet("/" + path.relative_to(state).as_posix(), path.read_text(encoding="utf-8"))
        if len(sheet.rows) >= 5 and len(sheet.header) >= 2:
            found[sheet.path] = sheet
    return found


def decimal(value: str) -> Decimal:
    try:
        return Decimal(value)
    except InvalidOperation:
        return Decimal(0)


def money(total: Decimal) -> float:
    """A sum as the instruction asks for it: rounded to 2 decimal places."""
    return float(total.quantize(Decimal("0.01")))


def quoted(name: str) -> str:
    """A column name or cell value as instructions quote it ("date"; backticks would read as a shell command)."""
    return f'"{name}"'


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
