"""Task families on the address book: add a contact, change one field, delete a contact, look a field up
(answer form).

Contacts are found by name (names are unique in the seed); each verifier checks the contact's fields
and that every other contact is exactly as seeded.
"""

from __future__ import annotations

import random
import re
import shlex
from pathlib import Path
from typing import Any

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.gui.base import (
    NEEDED_ACTIONS,
    SOLVE_PRELUDE,
    GuiFamily,
    all_of,
    answer_check,
    app_module,
    check,
    column,
    curl,
    database,
    missing,
    record_answer,
    rows,
    sql_text,
    submit_answer,
    unchanged,
)
from openforgerl.synth.family import Effect, TaskDraft

FIELDS = ("email", "phone", "company", "city")
SAID = {"email": "email address", "phone": "phone number", "company": "company", "city": "city"}
NEW_FIRST = ["Abebe", "Beatriz", "Cyrus", "Dalia", "Emeka", "Freya", "Gustav", "Hana", "Idris", "Julia"]
NEW_LAST = ["Arslan", "Bianchi", "Costa", "Danso", "Engel", "Fontaine", "Gruber", "Holm", "Ilves", "Juarez"]
NEW_COMPANIES = {"Harborview Press": "harborview.example", "Kestrel Robotics": "kestrel.example",
                 "Maple Street Bakery": "maplestreet.example", "Orbit Freight": "orbitfreight.example"}
NEW_CITIES = ["Porto", "Bergen", "Utrecht", "Graz", "Malmo", "Zadar"]
ROW = "SELECT email, phone, company, city FROM contacts WHERE name = {name}"
OTHERS = "SELECT id, name, email, phone, company, city FROM contacts WHERE name <> {name} ORDER BY id"
DESCRIPTION = "contacts (address book)"


def names(state: Path) -> list[str]:
    return column(state, "SELECT name FROM contacts ORDER BY id")


def fields_of(state: Path, name: str) -> dict[str, str]:
    [values] = rows(state, ROW.format(name="?"), [name])
    return dict(zip(FIELDS, values, strict=True))


def ascii_name(name: str) -> str:
    return name.lower().replace(" ", ".")


def new_value(rng: random.Random, field: str, name: str) -> str:
    """A value for ``field`` that no seeded contact has."""
    if field == "email":
        return f"{ascii_name(name)}@{rng.choice(sorted(NEW_COMPANIES.values()))}"
    if field == "phone":
        return f"+1 555 02{rng.randrange(100):02d}"
    return rng.choice(sorted(NEW_COMPANIES) if field == "company" else NEW_CITIES)


PLAUSIBLE = {
    "name": (re.compile(r"[A-Z][A-Za-z'-]+( [A-Z][A-Za-z'-]+){1,3}"), "a person's name (2-4 capitalised words)"),
    "email": (re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"), "an email address"),
    "phone": (re.compile(r"\+?[0-9][0-9 ()-]{5,18}[0-9]"), "a phone number"),
    "company": (re.compile(r"[A-Za-z0-9][A-Za-z0-9 &.,'-]{1,39}"), "a company name of up to 40 characters"),
    "city": (re.compile(r"[A-Z][A-Za-z .'-]{1,39}"), "a city name of up to 40 characters"),
}
"""What a proposed value must look like: a contact card a person would fill in, not a model's word salad."""


def valid_text(field: str, value: Any) -> str | None:
    if not isinstance(value, str) or not 2 <= len(value) <= 80 or value != " ".join(value.split()):
        return f"the {field} {value!r} must be 2 to 80 characters on one line"
    pattern, what = PLAUSIBLE.get(field, (None, ""))
    if pattern is not None and not pattern.fullmatch(value):
        return f"{value!r} is not {what}"
    return None


class ContactsFamily(GuiFamily):
    app = "contacts"

    def change(self, asset: Asset, action: Any) -> Effect:
        """An effect that runs ``action(store, db)`` on the host copy, as one request would."""
        def effect(root: Path) -> None:
            with database(root) as db:
                action(app_module(asset, "store"), db)
        return effect

    def update(self, asset: Asset, name: str, **fields: str) -> Effect:
        return self.change(asset, lambda s, db: s.update_contact(db, s.id_of(db, name), **fields))

    def delete(self, asset: Asset, *which: str) -> Effect:
        def action(store: Any, db: Any) -> None:
            for name in which:
                store.delete_contact(db, store.id_of(db, name))
        return self.change(asset, action)


def then(*effects: Effect) -> Effect:
    def effect(root: Path) -> None:
        for one in effects:
            one(root)
    return effect


def find_id(name: str) -> str:
    """solve.sh lines that set ``$id`` to the contact named ``name``."""
    return (f"id=$({curl('GET', 'api/contacts')} | jq -r --arg name {shlex.quote(name)} "
            "'.[] | select(.name == $name) | .id')\n"
            '[ -n "$id" ] || { echo "no such contact" >&2; exit 1; }\n')


class AddContact(ContactsFamily):
    """Add a new contact with all four fields."""

    name = "gui.contacts.add"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        taken = set(names(state))
        name = rng.choice([f"{f} {la}" for f in NEW_FIRST for la in NEW_LAST if f"{f} {la}" not in taken])
        company = rng.choice(sorted(NEW_COMPANIES))
        return {"name": name, "email": f"{ascii_name(name)}@{NEW_COMPANIES[company]}",
                "phone": new_value(rng, "phone", name), "company": company, "city": rng.choice(NEW_CITIES),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        text = {"type": "string", "minLength": 2, "maxLength": 80}
        return {"type": "object", "required": ["name", *FIELDS], "properties": {
            "name": {**text, "not": {"enum": names(state)}}, **{f: text for f in FIELDS},
            "email": {**text, "pattern": "^[^@ ]+@[^@ ]+$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        for field in ("name", *FIELDS):
            problem = valid_text(field, params.get(field))
            if problem:
                return problem
        if params["name"] in names(state):
            return f"a contact named {params['name']!r} already exists"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        name, values = params["name"], {f: params[f] for f in FIELDS}
        listed = ", ".join(f"{SAID[f]} {values[f]}" for f in FIELDS)
        wording = [f"Add a contact named {name} with {listed}.",
                   f"Save {name} in the address book: {listed}."][self.wording(params)]
        spec = all_of(check("contact", ROW.format(name=sql_text(name)), [[values[f] for f in FIELDS]]),
                      unchanged("others_unchanged", OTHERS.format(name=sql_text(name)), state))

        def add(**changed: str) -> Effect:
            return self.change(asset, lambda s, db: s.add_contact(db, name=name, **(values | changed)))

        other_domain = next(d for d in sorted(NEW_COMPANIES.values()) if not values["email"].endswith(d))
        return TaskDraft(
            title=f"Add the contact {name}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[name, *values.values()],
            solution=SOLVE_PRELUDE + curl("POST", "api/contacts", {"name": name, **values}) + "\n", oracle=add(),
            failure_cases={"no_phone": add(phone=""),
                           "wrong_email": add(email=values["email"].split("@")[0] + "@" + other_domain),
                           "added_twice": then(add(), add()),
                           "plus_deleted_other": then(add(), self.delete(asset, names(state)[0]))},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class EditField(ContactsFamily):
    """Change one field of a contact."""

    name = "gui.contacts.edit"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        name, field = rng.choice(names(state)), rng.choice(FIELDS)
        return {"name": name, "field": field, "value": new_value(rng, field, name), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["name", "field", "value"], "properties": {
            "name": {"enum": names(state)}, "field": {"enum": list(FIELDS)},
            "value": {"type": "string", "minLength": 2, "maxLength": 80}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        name, field = params.get("name"), params.get("field")
        if name not in names(state):
            return missing("contact", name, names(state))
        if field not in FIELDS:
            return f"field must be one of {', '.join(FIELDS)}, not {field!r}"
        if params.get("value") == fields_of(state, str(name))[str(field)]:
            return f"{name}'s {SAID[str(field)]} already is {params.get('value')!r}"
        return valid_text(str(field), params.get("value"))

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        name, field, value = params["name"], params["field"], params["value"]
        wording = [f"Change {name}'s {SAID[field]} to {value}.",
                   f"{name} has a new {SAID[field]}: {value}. Update the contact (and nothing else)."
                   ][self.wording(params)]
        expected = fields_of(state, name) | {field: value}
        spec = all_of(check("contact", ROW.format(name=sql_text(name)), [[expected[f] for f in FIELDS]]),
                      unchanged("others_unchanged", OTHERS.format(name=sql_text(name)), state))
        other = next(n for n in names(state) if n != name)
        wrong_field = "city" if field == "company" else "company"
        collateral = "city" if field != "city" else "company"
        return TaskDraft(
            title=f"Change {name}'s {SAID[field]}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[name, SAID[field], value],
            solution=SOLVE_PRELUDE + find_id(name) + curl("POST", "api/contacts/$id", {field: value}) + "\n",
            oracle=self.update(asset, name, **{field: value}),
            failure_cases={"edited_other": self.update(asset, other, **{field: value}),
                           "wrong_field": self.update(asset, name, **{wrong_field: value}),
                           "also_cleared": self.update(asset, name, **{field: value, collateral: ""})},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class DeleteContact(ContactsFamily):
    """Delete one contact."""

    name = "gui.contacts.delete"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"name": rng.choice(names(state)), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["name"], "properties": {"name": {"enum": names(state)}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("name") not in names(state):
            return missing("contact", params.get("name"), names(state))
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        name = params["name"]
        company = fields_of(state, name)["company"]
        wording = [f"Delete the contact {name}.",
                   f"Remove {name} ({company}) from the address book."][self.wording(params)]
        spec = all_of(check("contact_gone", f"SELECT count(*) FROM contacts WHERE name = {sql_text(name)}", [[0]]),
                      unchanged("others_unchanged", OTHERS.format(name=sql_text(name)), state))
        other = next(n for n in names(state) if n != name)
        return TaskDraft(
            title=f"Delete the contact {name}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[name],
            solution=SOLVE_PRELUDE + find_id(name) + curl("DELETE", "api/contacts/$id") + "\n",
            oracle=self.delete(asset, name),
            failure_cases={"deleted_other": self.delete(asset, other),
                           "cleared_instead": self.update(asset, name, email="", phone=""),
                           "deleted_two": self.delete(asset, name, other)},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class LookupField(ContactsFamily):
    """A contact's email, phone, company or city, submitted on the Answer page."""

    name = "gui.contacts.lookup"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"name": rng.choice(names(state)), "field": rng.choice(FIELDS), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["name", "field"], "properties": {
            "name": {"enum": names(state)}, "field": {"enum": list(FIELDS)}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("name") not in names(state):
            return missing("contact", params.get("name"), names(state))
        if params.get("field") not in FIELDS:
            return f"field must be one of {', '.join(FIELDS)}, not {params.get('field')!r}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        name, field = params["name"], params["field"]
        answer = fields_of(state, name)[field]
        wording = [f"What is the {SAID[field]} of {name}?",
                   f"Look up {name}'s {SAID[field]} in the address book."][self.wording(params)]
        instruction = (f"{self.where(DESCRIPTION)} {wording} Submit it, exactly as the app shows it, on the app's "
                       "Answer page (only your latest answer counts).")
        every = "SELECT id, name, email, phone, company, city FROM contacts ORDER BY id"
        spec = all_of(answer_check(answer), unchanged("contacts_unchanged", every, state))
        wrong = next(fields_of(state, n)[field] for n in names(state) if fields_of(state, n)[field] != answer)

        def say(text: str) -> Effect:
            return lambda root: record_answer(root, asset, text)

        collateral = "city" if field != "city" else "company"
        solution = (SOLVE_PRELUDE + f"value=$({curl('GET', 'api/contacts')} | jq -r --arg name {shlex.quote(name)} "
                    f"'.[] | select(.name == $name) | .{field}')\n" + submit_answer("value"))
        return TaskDraft(
            title=f"Look up {name}'s {SAID[field]}", instruction=instruction, spec=spec,
            required_literals=[name, SAID[field]], solution=solution, oracle=say(answer),
            failure_cases={"other_contact": say(wrong),
                           "right_but_edited": then(say(answer), self.update(asset, name, **{collateral: "Nowhere"}))},
            difficulty="medium", needed_actions=NEEDED_ACTIONS)
