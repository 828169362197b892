"""Record-reading families of the ``home`` asset: count log lines, export vCards, list .ics events.

The inputs are formats an agent has to parse by their rules (a log's level field, vCard properties,
iCalendar dates and escapes), and each instruction states the rule. Invariant: the expected answer is
computed here from the workspace file itself, and the instruction names that file, the rule and the
output path.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.claw.common import (
    host,
    json_word,
    json_writer,
    python_check,
    shell_path,
    slug,
    strongest,
    text_writer,
)
from openforgerl.synth.families.claw.files import OUT
from openforgerl.synth.family import Effect, Family, TaskDraft
from openforgerl.tasks import Domain

LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>\S+) \[(?P<component>[^\]]+)\]")
LEVELS = ["ERROR", "WARN"]


def logs(state: Path) -> dict[str, list[str]]:
    return {"/" + p.relative_to(state).as_posix(): p.read_text(encoding="utf-8").splitlines()
            for p in sorted((state / "app" / "logs").glob("*.log"))}


def level_counts(lines: list[str], level: str) -> dict[str, int]:
    """Component -> number of lines whose level field is exactly ``level``."""
    counts: dict[str, int] = {}
    for line in lines:
        match = LOG_LINE.match(line)
        if match and match["level"] == level:
            counts[match["component"]] = counts.get(match["component"], 0) + 1
    return dict(sorted(counts.items()))


class CountLog(Family):
    """Count the lines of one level in a log, in total (a text file) or per component (JSON)."""

    name = "claw.logs.count"
    domain: ClassVar[Domain] = "claw"
    description = "Count a log's ERROR or WARN lines (total or per component) into /app/out."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        log, level = rng.choice(sorted(logs(state))), rng.choice(LEVELS)
        per_component = rng.random() < 0.5
        stem = f"{OUT}/{Path(log).stem}_{level.lower()}"
        return {"log": log, "level": level, "per_component": per_component,
                "output": f"{stem}_by_component.json" if per_component else f"{stem}_count.txt"}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["log", "level", "per_component", "output"], "properties": {
            "log": {"enum": sorted(logs(state))}, "level": {"enum": LEVELS}, "per_component": {"type": "boolean"},
            "output": {"type": "string", "pattern": r"^/app/out/[\w.-]+\.(json|txt)$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        found = logs(state)
        if params.get("log") not in found:
            return f"there is no log {params.get('log')!r} (the logs are {sorted(found)})"
        if params.get("level") not in LEVELS:
            return f"level must be one of {LEVELS}"
        suffix = ".json" if params.get("per_component") else ".txt"
        output = str(params.get("output"))
        if not re.fullmatch(r"/app/out/[\w.-]+" + re.escape(suffix), output):
            return f"the output must be a {suffix} file directly in {OUT}/, got {output!r}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        log, level, output, per_component = params["log"], params["level"], params["output"], params["per_component"]
        lines = logs(state)[log]
        counts = level_counts(lines, level)
        total = sum(counts.values())
        naive = sum(level in line for line in lines)
        other = level_counts(lines, next(x for x in LEVELS if x != level))
        rule = (f"A line counts when its level field (the third space-separated field, right after the date and "
                f"the time) is exactly {level}; lines that only mention {level} in their message, and indented "
                f"continuation lines, do not count.")
        if per_component:
            what = (f"Write {output} as one JSON object mapping each component (the word in square brackets after "
                    f"the level, e.g. db for [db]) to its number of counted lines; leave out components with none.")
            smallest = min(counts, key=lambda k: (counts[k], k))
            failures: dict[str, Effect] = {
                "other_level": json_writer(output, other),
                "missing_component": json_writer(output, {k: v for k, v in counts.items() if k != smallest}),
                "off_by_one": json_writer(output, {**counts, smallest: counts[smallest] + 1})}
            if other == counts:
                del failures["other_level"]
            spec = {"type": "json_path", "name": "counts", "path": output, "json_path": "$", "equals": counts}
            oracle = json_writer(output, counts)
        else:
            what = f"Write the number of counted lines, and nothing else, to {output}."
            failures = {"off_by_one": text_writer(output, f"{total + 1}\n"),
                        "every_line": text_writer(output, f"{len(lines)}\n")}
            if sum(other.values()) != total:  # e.g. as many WARN as ERROR lines: the wrong level is no mistake
                failures["other_level"] = text_writer(output, f"{sum(other.values())}\n")
            if naive != total:
                failures["substring_match"] = text_writer(output, f"{naive}\n")
            spec = {"type": "file_regex", "name": "count", "path": output, "pattern": rf"\s*{total}\s*",
                    "fullmatch": True}
            oracle = text_writer(output, f"{total}\n")
        instruction = f"Count the {level} lines of the log {log}. {rule} {what} Create {OUT} if it does not exist."
        return TaskDraft(
            title=f"Count {level} lines in {Path(log).name}" + (" per component" if per_component else ""),
            instruction=instruction, spec=spec, solution=count_solution(log, level, per_component, output),
            required_literals=[log, output, level], oracle=oracle,
            failure_cases=strongest(failures, "substring_match", "missing_component", "other_level", "off_by_one",
                                   "every_line"),
            difficulty="medium" if per_component else "easy", needed_actions=["read", "search", "write"])


def count_solution(log: str, level: str, per_component: bool, output: str) -> str:
    if not per_component:
        return f"mkdir -p {OUT}\nawk '$3 == \"{level}\"' {log} | wc -l | tr -d ' ' > {output}\n"
    return f"""mkdir -p {OUT}
python3 - <<'PY'
import json, re
counts = {{}}
for line in open({log!r}):
    match = re.match(r"^\\S+ \\S+ (\\S+) \\[([^\\]]+)\\]", line)
    if match and match.group(1) == {level!r}:
        counts[match.group(2)] = counts.get(match.group(2), 0) + 1
with open({output!r}, "w") as out:
    json.dump(dict(sorted(counts.items())), out, indent=2)
PY
"""


# ---- vCards --------------------------------------------------------------------------------------

VCF = "/app/contacts/contacts.vcf"
CSV_CHECK = """import csv, json, sys
with open(sys.argv[1], newline="") as handle:
    rows = [row for row in csv.reader(handle) if row]
want = json.loads(sys.argv[2])
print(rows[:20])
sys.exit(0 if rows == want else 1)
"""


def contacts(state: Path) -> list[dict[str, str]]:
    """Each vCard's FN, ORG, EMAIL and TEL, in file order."""
    cards: list[dict[str, str]] = []
    card: dict[str, str] = {}
    for line in host(state, VCF).read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(":")
        prop = name.split(";")[0].upper()
        if prop == "BEGIN":
            card = {}
        elif prop == "END":
            cards.append(card)
        elif prop in ("FN", "ORG", "EMAIL", "TEL"):
            card[prop] = value
    return cards


class ExportContacts(Family):
    """Export the contacts of one organisation from a .vcf file to a sorted CSV."""

    name = "claw.contacts.export"
    domain: ClassVar[Domain] = "claw"
    description = "List one organisation's vCards as name,email,phone rows of a CSV in /app/out."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        org = rng.choice(sorted({c["ORG"] for c in contacts(state)}))
        return {"org": org, "output": f"{OUT}/{slug(org)}_contacts.csv"}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["org", "output"], "properties": {
            "org": {"enum": sorted({c["ORG"] for c in contacts(state)})},
            "output": {"type": "string", "pattern": r"^/app/out/[\w.-]+\.csv$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        orgs = sorted({c["ORG"] for c in contacts(state)})
        if params.get("org") not in orgs:
            return f"no contact works for {params.get('org')!r} (the organisations are {orgs})"
        if not re.fullmatch(r"/app/out/[\w.-]+\.csv", str(params.get("output"))):
            return f"the output must be a .csv file directly in {OUT}/"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        org, output = params["org"], params["output"]
        cards = contacts(state)
        chosen = [c for c in cards if c["ORG"] == org]
        header = ["name", "email", "phone"]

        def rows(selection: list[dict[str, str]], ordered: bool = True) -> list[list[str]]:
            picked = sorted(selection, key=lambda c: c["FN"]) if ordered else selection
            return [header, *[[c["FN"], c["EMAIL"], c["TEL"]] for c in picked]]

        def csv_writer(table: list[list[str]]) -> Effect:
            return text_writer(output, "".join(",".join(row) + "\n" for row in table))

        want = rows(chosen)
        failures = {"no_header": csv_writer(want[1:]), "missing_contact": csv_writer(want[:-1]),
                    "another_org_too": csv_writer(rows(chosen + [next(c for c in cards if c["ORG"] != org)]))}
        if rows(chosen, ordered=False) != want:
            failures["unsorted"] = csv_writer(rows(chosen, ordered=False))
        instruction = (
            f"From the vCards in {VCF}, write {output}: a CSV file whose first row is the header name,email,phone "
            f"and then one row per contact whose ORG is exactly {org}, holding the card's FN, EMAIL and TEL values "
            f"(as written in the card), sorted by name (FN) from A to Z. Create {OUT} if it does not exist.")
        solution = f"""mkdir -p {OUT}
python3 - <<'PY'
import csv
cards, card = [], {{}}
for line in open({VCF!r}, newline=""):
    name, _, value = line.rstrip("\\r\\n").partition(":")
    prop = name.split(";")[0].upper()
    if prop == "BEGIN":
        card = {{}}
    elif prop == "END":
        cards.append(card)
    else:
        card[prop] = value
chosen = sorted((c for c in cards if c.get("ORG") == {org!r}), key=lambda c: c["FN"])
with open({output!r}, "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(["name", "email", "phone"])
    writer.writerows([c["FN"], c["EMAIL"], c["TEL"]] for c in chosen)
PY
"""
        return TaskDraft(
            title=f"Export the {org} contacts to CSV", instruction=instruction,
            spec=python_check("rows", CSV_CHECK, shell_path(output), json_word(want)), solution=solution,
            required_literals=[VCF, output, org, "name,email,phone"], oracle=csv_writer(want),
            failure_cases=strongest(failures, "another_org_too", "missing_contact", "unsorted", "no_header"),
            difficulty="medium", needed_actions=["read", "write"])


# ---- iCalendar -----------------------------------------------------------------------------------

ICS = "/app/calendar/personal.ics"


def ics_events(state: Path) -> list[dict[str, str]]:
    """Each VEVENT's title, start, end (YYYY-MM-DDTHH:MM) and unescaped location, in file order."""
    events: list[dict[str, str]] = []
    event: dict[str, str] = {}
    for line in host(state, ICS).read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(":")
        if name == "BEGIN" and value == "VEVENT":
            event = {}
        elif name == "END" and value == "VEVENT":
            events.append(event)
        elif name in ("DTSTART", "DTEND"):
            event["start" if name == "DTSTART" else "end"] = \
                f"{value[:4]}-{value[4:6]}-{value[6:8]}T{value[9:11]}:{value[11:13]}"
        elif name == "SUMMARY":
            event["title"] = value
        elif name == "LOCATION":
            event["location"] = value.replace("\\,", ",").replace("\\;", ";")
    return sorted(events, key=lambda e: e["start"])


FIELD_SETS = [["title", "start"], ["title", "start", "end"], ["title", "start", "location"],
              ["title", "start", "end", "location"]]


class IcsAgenda(Family):
    """List the .ics events of a date range as a JSON array, sorted by start."""

    name = "claw.ics.agenda"
    domain: ClassVar[Domain] = "claw"
    description = "Extract the events between two dates from the .ics calendar into a JSON agenda."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        days = sorted({e["start"][:10] for e in ics_events(state)})
        first = rng.randrange(len(days) - 1)
        last = rng.randrange(first + 1, min(len(days), first + 6))
        return {"from": days[first], "to": days[last], "fields": rng.choice(FIELD_SETS),
                "output": f"{OUT}/agenda_{days[first]}_{days[last]}.json"}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        days = sorted({e["start"][:10] for e in ics_events(state)})
        return {"type": "object", "required": ["from", "to", "fields", "output"], "properties": {
            "from": {"enum": days}, "to": {"enum": days}, "fields": {"enum": FIELD_SETS},
            "output": {"type": "string", "pattern": r"^/app/out/[\w.-]+\.json$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        days = sorted({e["start"][:10] for e in ics_events(state)})
        start, end = params.get("from"), params.get("to")
        if start not in days or end not in days or str(start) >= str(end):
            return f"from and to must be two days with events, in order, got {start!r} to {end!r} (the days are {days})"
        if params.get("fields") not in FIELD_SETS:
            return f"fields must be one of {FIELD_SETS}"
        if not re.fullmatch(r"/app/out/[\w.-]+\.json", str(params.get("output"))):
            return f"the output must be a .json file directly in {OUT}/"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        start, end, fields, output = params["from"], params["to"], params["fields"], params["output"]
        events = ics_events(state)

        def agenda(low: str, high: str, keys: list[str]) -> list[dict[str, str]]:
            return [{k: e[k] for k in keys} for e in events if low <= e["start"][:10] <= high]

        want = agenda(start, end, fields)
        failures: dict[str, Effect] = {"last_day_left_out": json_writer(output, [e for e in want
                                                                                 if e["start"][:10] != end]),
                                       "first_field_only": json_writer(output, agenda(start, end, fields[:1]))}
        if want != list(reversed(want)):
            failures["newest_first"] = json_writer(output, list(reversed(want)))
        if "location" in fields and any("\\" in e.get("location", "") or "," in e.get("location", "") for e in want):
            failures["location_escaped"] = json_writer(output, [
                {**e, "location": e["location"].replace(",", "\\,")} for e in want])
        names = {"title": "`title` (its SUMMARY)", "start": "`start` (its DTSTART)", "end": "`end` (its DTEND)",
                 "location": "`location` (its LOCATION, with iCalendar escapes such as \\, undone)"}
        instruction = (
            f"Make an agenda from the calendar file {ICS}: write {output} holding one JSON array with one object "
            f"per event that starts on any day from {start} to {end} (both included), sorted by start time, oldest "
            f"first. Each object has exactly the keys {', '.join(names[f] for f in fields)}; write times as "
            f"YYYY-MM-DDTHH:MM (for example 2024-01-31T09:05). Create {OUT} if it does not exist.")
        return TaskDraft(
            title=f"Agenda from {start} to {end}", instruction=instruction,
            spec={"type": "json_path", "name": "agenda", "path": output, "json_path": "$", "equals": want},
            solution=agenda_solution(start, end, fields, output),
            required_literals=[ICS, output, start, end, *[f"`{f}`" for f in fields]],
            oracle=json_writer(output, want),
            failure_cases=strongest(failures, "last_day_left_out", "location_escaped",
                                    "newest_first", "first_field_only"),
            difficulty="medium",
            needed_actions=["read", "write"])


def agenda_solution(start: str, end: str, fields: list[str], output: str) -> str:
    return f"""mkdir -p {OUT}
python3 - <<'PY'
import json
events, event = [], {{}}
def stamp(value):
    return f"{{value[:4]}}-{{value[4:6]}}-{{value[6:8]}}T{{value[9:11]}}:{{value[11:13]}}"
for line in open({ICS!r}, newline=""):
    name, _, value = line.rstrip("\\r\\n").partition(":")
    if (name, value) == ("BEGIN", "VEVENT"):
        event = {{}}
    elif (name, value) == ("END", "VEVENT"):
        events.append(event)
    elif name in ("DTSTART", "DTEND"):
        event["start" if name == "DTSTART" else "end"] = stamp(value)
    elif name == "SUMMARY":
        event["title"] = value
    elif name == "LOCATION":
        event["location"] = value.replace("\\\\,", ",").replace("\\\\;", ";")
chosen = sorted((e for e in events if {start!r} <= e["start"][:10] <= {end!r}), key=lambda e: e["start"])
with open({output!r}, "w") as out:
    json.dump([{{k: e[k] for k in {fields!r}}} for e in chosen], out, indent=2)
PY
"""
