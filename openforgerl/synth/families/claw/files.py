"""File-workspace families of the ``home`` asset: aggregate a CSV, convert CSV to JSON, organize downloads.

Every expected value (a total, a row, a file's new place) is derived here from the workspace's real
files (``state``), and each instruction names its source, its rule and its output path. Invariant:
the verifier compares the whole output (or the whole folder), so a partial job or collateral damage
scores 0.
"""

from __future__ import annotations

import hashlib
import random
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.claw.common import (
    Sheet,
    decimal,
    host,
    json_word,
    json_writer,
    money,
    python_check,
    quoted,
    sheets,
    strongest,
)
from openforgerl.synth.family import Effect, Family, TaskDraft
from openforgerl.tasks import Domain

OUT = "/app/out"


class Aggregate(Family):
    """Sum a numeric column of a CSV per value of a text column (optionally one month) into a JSON object."""

    name = "claw.files.aggregate"
    domain: ClassVar[Domain] = "claw"
    description = "Total a CSV column per group (optionally for one month) into /app/out/<name>.json."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        found = {p: s for p, s in sheets(state).items() if s.measures and s.groups}
        source = rng.choice(sorted(found))
        sheet = found[source]
        value, group = rng.choice(sheet.measures), rng.choice(sheet.groups)
        month = rng.choice(sheet.months) if len(sheet.months) > 1 and rng.random() < 0.6 else None
        stem = Path(source).stem
        output = f"{OUT}/{stem}_{value}_by_{group}{'_' + month if month else ''}.json"
        return {"source": source, "value": value, "group_by": group, "month": month, "output": output}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        found = sheets(state)
        return {"type": "object", "required": ["source", "value", "group_by", "output"], "properties": {
            "source": {"enum": sorted(found)},
            "value": {"enum": sorted({c for s in found.values() for c in s.measures})},
            "group_by": {"enum": sorted({c for s in found.values() for c in s.groups})},
            "month": {"enum": [None, *sorted({m for s in found.values() for m in s.months})]},
            "output": {"type": "string", "pattern": r"^/app/out/[\w.-]+\.json$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        sheet = sheets(state).get(str(params.get("source")))
        if sheet is None:
            return f"there is no CSV sheet {params.get('source')!r} in the workspace"
        if params.get("value") not in sheet.measures:
            return f"{sheet.path} has no numeric column {params.get('value')!r} (it has {sheet.measures})"
        if params.get("group_by") not in sheet.groups:
            return f"{sheet.path} has no column {params.get('group_by')!r} to group by (it has {sheet.groups})"
        if params.get("month") is not None and params["month"] not in sheet.months:
            return f"{sheet.path} has no rows in month {params['month']!r}"
        return check_output(params.get("output"), ".json")

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        sheet = sheets(state)[params["source"]]
        value, group, month, output = params["value"], params["group_by"], params["month"], params["output"]
        totals = totals_by(sheet, value, group, month)
        where = f', counting only the rows whose "date" starts with {month}' if month else ""
        instruction = (
            f'In the spreadsheet {sheet.path}, add up the "{value}" column for each distinct value of the '
            f'"{group}" column{where}. Write the result to {output} as one JSON object that maps each "{group}" '
            f'value to its total, rounded to 2 decimal places (for example {{"some {group}": 12.5}}). '
            f'Include every "{group}" value that has at least one counted row and nothing else. '
            f"Create {OUT} if it does not exist, and leave {sheet.path} unchanged.")
        failures: dict[str, Effect] = {"counts_not_sums": json_writer(output, counts_by(sheet, group, month))}
        if month and totals_by(sheet, value, group, None) != totals:  # a sheet of one month: no mistake to make
            failures["every_month"] = json_writer(output, totals_by(sheet, value, group, None))
        if len(totals) > 1:
            smallest = min(totals, key=lambda k: (totals[k], k))
            failures["missing_group"] = json_writer(output, {k: v for k, v in totals.items() if k != smallest})
        return TaskDraft(
            title=f"Total {value} by {group} in {Path(sheet.path).name}" + (f" for {month}" if month else ""),
            instruction=instruction,
            spec={"type": "json_path", "name": "totals", "path": output, "json_path": "$", "equals": totals},
            solution=aggregate_solution(sheet.path, value, group, month, output),
            required_literals=[sheet.path, output, quoted(value), quoted(group), *([month] if month else [])],
            oracle=json_writer(output, totals),
            failure_cases=strongest(failures, "missing_group", "every_month", "counts_not_sums"),
            difficulty="medium" if month else "easy", needed_actions=["read", "run", "write"])


def totals_by(sheet: Sheet, value: str, group: str, month: str | None) -> dict[str, float]:
    sums: dict[str, Decimal] = {}
    for record in sheet.records:
        if month and not record.get("date", "").startswith(month):
            continue
        sums[record[group]] = sums.get(record[group], Decimal(0)) + decimal(record[value])
    return {key: money(total) for key, total in sorted(sums.items())}


def counts_by(sheet: Sheet, group: str, month: str | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in sheet.records:
        if not month or record.get("date", "").startswith(month):
            counts[record[group]] = counts.get(record[group], 0) + 1
    return counts


def aggregate_solution(source: str, value: str, group: str, month: str | None, output: str) -> str:
    keep = f"row['date'].startswith({month!r})" if month else "True"
    return f"""mkdir -p {OUT}
python3 - <<'PY'
import csv, json
from decimal import Decimal
totals = {{}}
with open({source!r}, newline="") as handle:
    for row in csv.DictReader(handle):
        if {keep}:
            totals[row[{group!r}]] = totals.get(row[{group!r}], Decimal(0)) + Decimal(row[{value!r}])
with open({output!r}, "w") as out:
    json.dump({{k: float(round(v, 2)) for k, v in sorted(totals.items())}}, out, indent=2)
PY
"""


def check_output(output: Any, suffix: str) -> str | None:
    text = str(output)
    if not text.startswith(OUT + "/") or not text.endswith(suffix) or "/" in text[len(OUT) + 1:] or " " in text:
        return f"the output {output!r} must be a {suffix} file directly in {OUT}/ with no spaces in its name"
    return None


class Convert(Family):
    """Convert (some columns and rows of) a CSV into a JSON array of objects, numbers typed."""

    name = "claw.files.convert"
    domain: ClassVar[Domain] = "claw"
    description = "Convert a CSV (chosen columns, optionally filtered rows) to a JSON array in /app/out."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        found = sheets(state)
        source = rng.choice(sorted(found))
        sheet = found[source]
        count = rng.randint(2, len(sheet.header))
        chosen = set(rng.sample(sheet.header, count))
        columns = [c for c in sheet.header if c in chosen]
        where = None
        if sheet.groups and rng.random() < 0.7:
            column = rng.choice(sheet.groups)
            where = {"column": column, "equals": rng.choice(sorted(set(sheet.values(column))))}
        name = Path(source).stem + (f"_{where['equals'].replace(' ', '-')}" if where else "")
        return {"source": source, "columns": columns, "where": where, "output": f"{OUT}/{name}.json"}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        found = sheets(state)
        return {"type": "object", "required": ["source", "columns", "output"], "properties": {
            "source": {"enum": sorted(found)},
            "columns": {"type": "array", "items": {"enum": sorted({c for s in found.values() for c in s.header})}},
            "where": {"type": ["object", "null"], "properties": {"column": {"type": "string"},
                                                                  "equals": {"type": "string"}}},
            "output": {"type": "string", "pattern": r"^/app/out/[\w.-]+\.json$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        sheet = sheets(state).get(str(params.get("source")))
        if sheet is None:
            return f"there is no CSV sheet {params.get('source')!r} in the workspace"
        columns = params.get("columns")
        if not isinstance(columns, list) or len(columns) < 2 or any(c not in sheet.header for c in columns):
            return f"columns must be at least two of {sheet.header}, got {columns!r}"
        where = params.get("where")
        if where is not None:
            if not isinstance(where, dict) or where.get("column") not in sheet.header:
                return f"where must name a column of {sheet.path}, got {where!r}"
            if where.get("equals") not in sheet.values(where["column"]):
                return f"no row of {sheet.path} has {where['column']} = {where.get('equals')!r}"
        return check_output(params.get("output"), ".json")

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        sheet = sheets(state)[params["source"]]
        columns, where, output = list(params["columns"]), params["where"], params["output"]
        rows = converted(sheet, columns, where)
        numeric = [c for c in columns if sheet.is_numeric(c)]
        named = ", ".join(quoted(c) for c in columns)
        rule = (f"Only the rows whose {quoted(where['column'])} is exactly {quoted(where['equals'])} go in, in file "
                f"order. "
                if where else "Every row goes in, in file order. ")
        typing = (f"Write {', '.join(quoted(c) for c in numeric)} as JSON numbers and every other value as a "
                  f"string. " if numeric else "Write every value as a JSON string. ")
        instruction = (
            f"Convert the spreadsheet {sheet.path} to JSON: write {output} holding one JSON array with one "
            f"object per row, each object having exactly the keys {named} (the CSV columns of the same names). "
            f"{rule}{typing}Create {OUT} if it does not exist, and leave {sheet.path} unchanged.")
        failures: dict[str, Effect] = {"missing_last_row": json_writer(output, rows[:-1])}
        if numeric:
            failures["numbers_as_strings"] = json_writer(output, converted(sheet, columns, where, typed=False))
        if where and len(converted(sheet, columns, None)) != len(rows):
            failures["unfiltered"] = json_writer(output, converted(sheet, columns, None))
        if len(columns) < len(sheet.header):
            failures["every_column"] = json_writer(output, converted(sheet, sheet.header, where))
        literals = [sheet.path, output, *[quoted(c) for c in columns]]
        literals += [quoted(where["column"]), quoted(where["equals"])] if where else []
        return TaskDraft(
            title=f"Convert {Path(sheet.path).name} to JSON" + (f" ({where['equals']} only)" if where else ""),
            instruction=instruction,
            spec={"type": "json_path", "name": "rows", "path": output, "json_path": "$", "equals": rows},
            solution=convert_solution(sheet.path, columns, numeric, sheet, where, output),
            required_literals=literals, oracle=json_writer(output, rows),
            failure_cases=strongest(failures, "missing_last_row", "unfiltered", "numbers_as_strings", "every_column"),
            difficulty="medium" if where else "easy", needed_actions=["read", "run", "write"])


def converted(sheet: Sheet, columns: list[str], where: dict[str, str] | None, typed: bool = True) -> list[dict]:
    chosen = [r for r in sheet.records if where is None or r.get(where["column"]) == where["equals"]]
    return [{c: sheet.typed(c, r[c]) if typed else r[c] for c in columns} for r in chosen]


def convert_solution(source: str, columns: list[str], numeric: list[str], sheet: Sheet,
                     where: dict[str, str] | None, output: str) -> str:
    integers = [c for c in numeric if sheet.is_integer(c)]
    keep = f"row[{where['column']!r}] == {where['equals']!r}" if where else "True"
    return f"""mkdir -p {OUT}
python3 - <<'PY'
import csv, json
columns, integers, numbers = {columns!r}, {integers!r}, {numeric!r}
def cell(column, text):
    if column in integers:
        return int(text)
    return float(text) if column in numbers else text
with open({source!r}, newline="") as handle:
    rows = [{{c: cell(c, row[c]) for c in columns}} for row in csv.DictReader(handle) if {keep}]
with open({output!r}, "w") as out:
    json.dump(rows, out, indent=2)
PY
"""


# ---- organize -----------------------------------------------------------------------------------

DOWNLOADS = "/app/downloads"
DESTINATIONS = ["/app/downloads", "/app/sorted", "/app/downloads/by-type", "/app/archive"]
TREE_CHECK = """import hashlib, json, os, sys
root = os.environ.get("FORGE_ROOT", "")
want = json.loads(sys.argv[1])
have = {}
for top in want["scan"]:
    for base, _, names in os.walk(root + top):
        for name in names:
            full = os.path.join(base, name)
            with open(full, "rb") as handle:
                have[full[len(root):]] = hashlib.sha256(handle.read()).hexdigest()[:16]
missing = sorted(set(want["files"]) - set(have))
extra = sorted(set(have) - set(want["files"]))
changed = sorted(p for p in set(have) & set(want["files"]) if have[p] != want["files"][p])
print("missing:", missing[:5], "unexpected:", extra[:5], "changed:", changed[:5])
sys.exit(0 if not (missing or extra or changed) else 1)
"""


def downloads(state: Path) -> dict[str, str]:
    """File name -> its sha256 prefix, for the files directly in /app/downloads."""
    folder = host(state, DOWNLOADS)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(folder.iterdir()) if p.is_file()}


def extension(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


class Organize(Family):
    """Move the downloads of some file types into one folder per (lower-case) extension."""

    name = "claw.files.organize"
    domain: ClassVar[Domain] = "claw"
    description = "Move the files of chosen extensions out of /app/downloads into <dest>/<ext>/."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        kinds = sorted({extension(n) for n in downloads(state)} - {""})
        chosen = sorted(rng.sample(kinds, rng.randint(1, min(3, len(kinds) - 1))))
        return {"extensions": chosen, "dest": rng.choice(DESTINATIONS)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        kinds = sorted({extension(n) for n in downloads(state)} - {""})
        return {"type": "object", "required": ["extensions", "dest"], "properties": {
            "extensions": {"type": "array", "minItems": 1, "items": {"enum": kinds}},
            "dest": {"enum": DESTINATIONS}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        kinds = {extension(n) for n in downloads(state)}
        chosen = params.get("extensions")
        if not isinstance(chosen, list) or not chosen or any(k not in kinds for k in chosen):
            return f"extensions must be some of {sorted(kinds - {''})} (the downloads' kinds), got {chosen!r}"
        if set(chosen) >= kinds - {""}:
            return "moving every kind of file leaves nothing to tell apart; choose fewer extensions"
        if params.get("dest") not in DESTINATIONS:
            return f"dest must be one of {DESTINATIONS}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        chosen, dest = sorted(params["extensions"]), params["dest"]
        files = downloads(state)
        moving = {n for n in files if extension(n) in chosen}
        final = layout(files, moving, dest)
        scan = [DOWNLOADS] if dest.startswith(DOWNLOADS) else [DOWNLOADS, dest]
        kinds = " or ".join(f".{k}" for k in chosen)
        instruction = (
            f"Tidy {DOWNLOADS}: move every file directly in {DOWNLOADS} whose extension is {kinds} into the folder "
            f"{dest}/<extension>/, where <extension> is the extension in lower case without the dot "
            f"(a file example.{chosen[0].upper()} would go to {dest}/{chosen[0]}/example.{chosen[0].upper()}): "
            f"extensions are compared case-insensitively. Keep each file's name and content, create the folders "
            f"you need, and leave every other file in {DOWNLOADS} where it is, unchanged. Create nothing else under "
            f"{' or '.join(scan)}.")
        partial = {n for n in moving if extension(n) == chosen[0]}
        failures: dict[str, Effect] = {
            "copied_not_moved": organizer(files, moving, dest, keep_originals=True),
            "every_kind_moved": organizer(files, set(files), dest)}
        if len(chosen) > 1:
            failures["only_first_kind"] = organizer(files, partial, dest)
        exact_case = {n for n in moving if n.rsplit(".", 1)[-1] in chosen}
        if exact_case != moving:
            failures["case_sensitive"] = organizer(files, exact_case, dest)
        return TaskDraft(
            title=f"Sort the {', '.join(chosen)} downloads into {dest}",
            instruction=instruction,
            spec=python_check("folders", TREE_CHECK, json_word({"scan": scan, "files": final})),
            solution=organize_solution(chosen, dest),
            required_literals=[DOWNLOADS, *[f".{k}" for k in chosen], f"{dest}/<extension>/"],
            oracle=organizer(files, moving, dest),
            failure_cases=strongest(failures, "every_kind_moved", "copied_not_moved", "case_sensitive",
                                    "only_first_kind"),
            difficulty="medium", needed_actions=["list", "write"])


def layout(files: dict[str, str], moving: set[str], dest: str) -> dict[str, str]:
    """Container path -> sha256 prefix of every file once the chosen ones moved."""
    return {(f"{dest}/{extension(n)}/{n}" if n in moving else f"{DOWNLOADS}/{n}"): digest
            for n, digest in sorted(files.items())}


def organizer(files: dict[str, str], moving: set[str], dest: str, keep_originals: bool = False) -> Effect:
    def effect(root: Path) -> None:
        for name in sorted(moving):
            source, target = host(root, f"{DOWNLOADS}/{name}"), host(root, f"{dest}/{extension(name)}/{name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            if not keep_originals:
                source.unlink()
    return effect


def organize_solution(chosen: list[str], dest: str) -> str:
    return f"""cd {DOWNLOADS}
for file in *; do
  [ -f "$file" ] || continue
  case "$file" in *.*) ext="${{file##*.}}" ;; *) continue ;; esac
  ext="$(printf '%s' "$ext" | tr '[:upper:]' '[:lower:]')"
  case " {' '.join(chosen)} " in
    *" $ext "*) mkdir -p "{dest}/$ext" && mv "$file" "{dest}/$ext/$file" ;;
  esac
done
"""
