"""Config families of the ``home`` asset: set one key of an INI file or of a JSON file.

New values are drawn from the key's current value (a different number, the opposite switch, another
plausible word), never free text. Invariant: the verifier compares the whole parsed file with the
expected one, so the right key in the wrong section, a wrongly typed value or any other edit scores 0.
"""

from __future__ import annotations

import configparser
import json
import random
import re
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.claw.common import host, json_word, python_check, shell_path, strongest, write_file
from openforgerl.synth.family import Effect, Family, TaskDraft
from openforgerl.tasks import Domain

SWITCHES = {"true": "false", "false": "true", "yes": "no", "no": "yes", "on": "off", "off": "on"}
WORDS = {"level": ["DEBUG", "INFO", "WARNING", "ERROR"], "frequency": ["hourly", "daily", "weekly"],
         "engine": ["sqlite", "postgres", "mysql"], "theme": ["light", "dark", "solarized"],
         "language": ["en-US", "de-DE", "fr-FR", "pt-PT"], "font": ["Fira Code", "JetBrains Mono", "Source Code Pro"],
         "size": ["A4", "A5", "Letter"]}
CLOCK = re.compile(r"^\d{2}:\d{2}$")


def new_value(rng: random.Random, key: str, current: str) -> str | None:
    """A plausible different value for a setting, as text; None when the key has none to offer."""
    if current.lower() in SWITCHES:
        return SWITCHES[current.lower()]
    if current.isdigit():
        number = int(current)
        options = sorted({max(1, number // 2), number + rng.randint(1, 9), number * 2, number + 10} - {number})
        return str(rng.choice(options))
    if CLOCK.match(current):
        return rng.choice([f"{h:02d}:{m:02d}" for h in range(24) for m in (0, 15, 30, 45) if f"{h:02d}:{m:02d}" !=
                           current])
    words = [w for w in WORDS.get(key, []) if w != current]
    return rng.choice(words) if words else None


# ---- INI -----------------------------------------------------------------------------------------

INI_CHECK = """import configparser, json, sys
parser = configparser.ConfigParser(interpolation=None)
parser.optionxform = str
with open(sys.argv[1]) as handle:
    parser.read_file(handle)
have = {s: dict(parser[s]) for s in parser.sections()}
want = json.loads(sys.argv[2])
print(json.dumps(have, sort_keys=True)[:1500])
sys.exit(0 if have == want else 1)
"""


def ini_files(state: Path) -> dict[str, dict[str, dict[str, str]]]:
    """Container path -> section -> key -> value of every INI file under /app."""
    found = {}
    for path in sorted((state / "app").rglob("*.ini")):
        found["/" + path.relative_to(state).as_posix()] = read_ini(path.read_text(encoding="utf-8"))
    return found


def read_ini(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return {section: dict(parser[section]) for section in parser.sections()}


def set_ini_line(text: str, section: str, key: str, value: str) -> str:
    """The INI text with ``key`` of ``section`` set to ``value`` (comments and layout kept)."""
    lines, current = text.splitlines(keepends=True), None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1]
        elif current == section and re.match(rf"{re.escape(key)}\s*[=:]", stripped):
            lines[index] = f"{key} = {value}\n"
    return "".join(lines)


def ini_editor(path: str, edits: list[tuple[str, str, str]]) -> Effect:
    def effect(root: Path) -> None:
        text = host(root, path).read_text(encoding="utf-8")
        for section, key, value in edits:
            text = set_ini_line(text, section, key, value)
        write_file(root, path, text)
    return effect


class SetIni(Family):
    """Set one key of one section of an INI file; every other setting stays as it is."""

    name = "claw.config.set_ini"
    domain: ClassVar[Domain] = "claw"
    description = "Set key K of section [S] in an INI file under /app/config to V."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        files = ini_files(state)
        settable = [(path, section, key) for path, sections in files.items() for section, keys in sections.items()
                    for key, value in keys.items() if new_value(random.Random(0), key, value) is not None]
        path, section, key = rng.choice(settable)
        value = new_value(rng, key, files[path][section][key])
        return {"file": path, "section": section, "key": key, "value": value}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        files = ini_files(state)
        return {"type": "object", "required": ["file", "section", "key", "value"], "properties": {
            "file": {"enum": sorted(files)},
            "section": {"enum": sorted({s for f in files.values() for s in f})},
            "key": {"enum": sorted({k for f in files.values() for s in f.values() for k in s})},
            "value": {"type": "string", "pattern": r"^[\w.:/-]+$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        sections = ini_files(state).get(str(params.get("file")))
        if sections is None:
            return f"there is no INI file {params.get('file')!r} in the workspace"
        section, key, value = params.get("section"), params.get("key"), str(params.get("value"))
        if section not in sections:
            return f"{params['file']} has no section [{section}] (it has {sorted(sections)})"
        if key not in sections[section]:
            return f"section [{section}] of {params['file']} has no key {key!r} (it has {sorted(sections[section])})"
        if not re.fullmatch(r"[\w.:/-]+", value) or value == sections[section][key]:
            return f"the value {value!r} must be one word that differs from the current {sections[section][key]!r}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        path, section, key, value = params["file"], params["section"], params["key"], params["value"]
        sections = ini_files(state)[path]
        want = {s: {k: (value if (s, k) == (section, key) else v) for k, v in keys.items()}
                for s, keys in sections.items()}
        instruction = (
            f"In the config file {path}, set the key `{key}` in the [{section}] section to `{value}` "
            f"(written as `{key} = {value}`). Leave every other section, key and value exactly as it is.")
        failures: dict[str, Effect] = {"quoted_value": ini_editor(path, [(section, key, f'"{value}"')])}
        elsewhere = [s for s in sections if s != section and key in sections[s]]
        if elsewhere:
            failures["wrong_section"] = ini_editor(path, [(elsewhere[0], key, value)])
        others = [(s, k) for s, keys in sections.items() for k in keys if (s, k) != (section, key)]
        if others:
            other_section, other_key = others[0]
            failures["collateral_edit"] = ini_editor(path, [(section, key, value),
                                                            (other_section, other_key, "changed")])
        escaped = value.replace("/", "\\/")
        solution = f"sed -i '/^\\[{section}\\]/,/^\\[/ s/^{key} *[=:].*/{key} = {escaped}/' {path}\n"
        return TaskDraft(
            title=f"Set {key} in [{section}] of {Path(path).name} to {value}", instruction=instruction,
            spec=python_check("settings", INI_CHECK, shell_path(path), json_word(want)),
            solution=solution, required_literals=[path, f"[{section}]", f"`{key}`", f"`{value}`"],
            oracle=ini_editor(path, [(section, key, value)]),
            failure_cases=strongest(failures, "wrong_section", "collateral_edit", "quoted_value"),
            difficulty="easy", needed_actions=["read", "write"])


# ---- JSON ----------------------------------------------------------------------------------------

def json_files(state: Path) -> dict[str, Any]:
    """Container path -> parsed document of every JSON config under /app/config."""
    return {"/" + p.relative_to(state).as_posix(): json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((state / "app" / "config").glob("*.json"))}


def leaves(document: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, value) of every scalar under a JSON object."""
    if isinstance(document, dict):
        return [leaf for key, value in document.items() for leaf in leaves(value, (*prefix, key))]
    return [(prefix, document)]


def json_value(rng: random.Random, key: str, current: Any) -> Any:
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return int(new_value(rng, key, str(current)) or current + 1)
    if isinstance(current, str):
        return new_value(rng, key, current)
    return None


def with_leaf(document: Any, keys: list[str], value: Any) -> Any:
    copy = json.loads(json.dumps(document))
    node = copy
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return copy


def lookup(document: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(document, dict) or key not in document:
            return KeyError
        document = document[key]
    return document


class SetJson(Family):
    """Set one (nested) key of a JSON config, with the right JSON type; nothing else changes."""

    name = "claw.config.set_json"
    domain: ClassVar[Domain] = "claw"
    description = "Set a.b.c in a JSON config under /app/config to a typed value."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        files = json_files(state)
        settable = [(path, list(keys)) for path, document in files.items() for keys, value in leaves(document)
                    if json_value(random.Random(0), keys[-1], value) is not None]
        path, keys = rng.choice(settable)
        return {"file": path, "key": ".".join(keys), "value": json_value(rng, keys[-1], lookup(files[path], keys))}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        files = json_files(state)
        return {"type": "object", "required": ["file", "key", "value"], "properties": {
            "file": {"enum": sorted(files)},
            "key": {"enum": sorted({".".join(k) for d in files.values() for k, _ in leaves(d)})},
            "value": {"type": ["string", "integer", "boolean"]}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        document = json_files(state).get(str(params.get("file")))
        if document is None:
            return f"there is no JSON config {params.get('file')!r} in the workspace"
        keys = str(params.get("key")).split(".")
        current, value = lookup(document, keys), params.get("value")
        if current is KeyError or isinstance(current, (dict, list)):
            return f"{params['file']} has no setting {params.get('key')!r}"
        if type(value) is not type(current) or value == current:
            return f"the value {value!r} must be a new {type(current).__name__} (now {current!r})"
        if isinstance(value, str) and not re.fullmatch(r"[\w .:/-]+", value):
            return f"the value {value!r} must be plain words"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        path, key, value = params["file"], params["key"], params["value"]
        keys = key.split(".")
        document = json_files(state)[path]
        want = with_leaf(document, keys, value)
        shown = json.dumps(value)
        kind = {bool: "a JSON boolean", int: "a JSON number", str: "a JSON string"}[type(value)]
        where = (f"(the key `{keys[-1]}` inside the " + " object inside the ".join(f"`{k}`" for k in
                                                                                    reversed(keys[:-1])) + " object) "
                 if len(keys) > 1 else "")
        instruction = (
            f"In the JSON config {path}, set `{key}` {where}to {shown}, as {kind}. Keep the file valid JSON and "
            f"every other key and value exactly as it is.")
        failures: dict[str, Effect] = {}
        if not isinstance(value, str):
            failures["wrong_type"] = json_writer(path, with_leaf(document, keys, str(value).lower()))
        siblings = [k for k, v in leaves(document) if list(k) != keys and type(v) is type(value)]
        if siblings:
            failures["wrong_key"] = json_writer(path, with_leaf(document, list(siblings[0]), value))
            other = list(siblings[-1])
            failures["collateral_edit"] = json_writer(path, with_leaf(want, other, json_value(
                random.Random(1), other[-1], lookup(document, other))))
        solution = f"""python3 - <<'PY'
import json
with open({path!r}) as handle:
    config = json.load(handle)
node = config
for key in {keys[:-1]!r}:
    node = node[key]
node[{keys[-1]!r}] = json.loads({shown!r})
with open({path!r}, "w") as handle:
    json.dump(config, handle, indent=2)
    handle.write("\\n")
PY
"""
        spec = {"type": "all", "checks": [
            {"type": "json_path", "name": "setting", "path": path, "json_path": "$." + key, "equals": value},
            {"type": "json_path", "name": "everything_else", "path": path, "json_path": "$", "equals": want}]}
        return TaskDraft(
            title=f"Set {key} in {Path(path).name} to {shown}", instruction=instruction, spec=spec,
            solution=solution, required_literals=[path, f"`{key}`", shown], oracle=json_writer(path, want),
            failure_cases=strongest(failures, "wrong_key", "collateral_edit", "wrong_type"),
            difficulty="easy", needed_actions=["read", "write"])


def json_writer(path: str, document: Any) -> Effect:
    def effect(root: Path) -> None:
        write_file(root, path, json.dumps(document, indent=2) + "\n")
    return effect
