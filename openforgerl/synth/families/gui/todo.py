"""Task families on the to-do app: add, complete, rename and delete an item; count items (answer form).

Each verifier is ``all`` of the asked-for rows and "every other item is as seeded"; items are found
by title (titles are unique in the seed), so deleting and re-adding an item the same way also counts.
"""

from __future__ import annotations

import random
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
    query_param,
    record_answer,
    rows,
    sql_text,
    submit_answer,
    unchanged,
)
from openforgerl.synth.family import Effect, TaskDraft

NEW_TITLES = ["Call the plumber", "Order new business cards", "Renew the passport", "Plan the garden beds",
              "Send the thank-you notes", "Back up the laptop", "Schedule the eye test", "Pay the water bill",
              "Book the car inspection", "Write the newsletter", "Clean the oven", "Test the fire alarm",
              "Buy birthday candles", "Archive the old invoices", "Repaint the fence", "Reply to the landlord",
              "Order the conference badges", "Mend the garden gate", "Print the boarding passes",
              "Check the tyre pressure"]
DUE_DATES = [f"2027-{month:02d}-{day:02d}" for month in (3, 4) for day in range(1, 29)]
ITEM = "SELECT l.name, t.due, t.done FROM todos t JOIN lists l ON l.id = t.list_id WHERE t.title = {title}"
OTHERS = "SELECT id, list_id, title, due, done FROM todos WHERE title <> {title} ORDER BY id"
DESCRIPTION = "to-do"


def titles(state: Path, done: bool | None = None) -> list[str]:
    where = "" if done is None else f" WHERE done = {int(done)}"
    return column(state, f"SELECT title FROM todos{where} ORDER BY id")


def list_names(state: Path) -> list[str]:
    return column(state, "SELECT name FROM lists ORDER BY id")


def item(state: Path, title: str) -> tuple[str, str, int]:
    [[list_name, due, done]] = rows(state, ITEM.format(title="?"), [title])
    return list_name, due, done


def find_id(title: str) -> str:
    """solve.sh lines that set ``$id`` to the item titled ``title`` (failing when there is none)."""
    return (f"id=$({curl('GET', 'api/todos')} | jq -r --arg title {shlex.quote(title)} "
            "'.[] | select(.title == $title) | .id')\n"
            '[ -n "$id" ] || { echo "no such item" >&2; exit 1; }\n')


class TodoFamily(GuiFamily):
    app = "todo"

    def store(self, asset: Asset) -> Any:
        return app_module(asset, "store")

    def change(self, asset: Asset, action: Any) -> Effect:
        """An effect that runs ``action(store, db)`` on the host copy, as one request would."""
        def effect(root: Path) -> None:
            with database(root) as db:
                action(self.store(asset), db)
        return effect


class AddItem(TodoFamily):
    """Add an item with a title, a list and a due date (or none)."""

    name = "gui.todo.add"
    phrasings = 3

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        taken = set(titles(state))
        return {"title": rng.choice([t for t in NEW_TITLES if t not in taken]),
                "list": rng.choice(list_names(state)),
                "due": rng.choice(DUE_DATES) if rng.random() < 0.75 else "", "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title", "list", "due"], "properties": {
            "title": {"type": "string", "minLength": 3, "maxLength": 80, "not": {"enum": titles(state)}},
            "list": {"enum": list_names(state)},
            "due": {"type": "string", "pattern": r"^(2027-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8]))?$"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        title, due = str(params.get("title", "")), str(params.get("due", ""))
        if not 3 <= len(title) <= 80 or title != " ".join(title.split()) or '"' in title:
            return f"the title {title!r} must be 3 to 80 characters on one line, without double quotes"
        if title in titles(state):
            return f"an item titled {title!r} already exists"
        if params.get("list") not in list_names(state):
            return missing("list", params.get("list"), list_names(state))
        if due and due not in DUE_DATES:
            return f"the due date {due!r} is not a day of 2027-03 or 2027-04 up to the 28th (YYYY-MM-DD)"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        title, list_name, due = params["title"], params["list"], params["due"]
        other_list = next(n for n in list_names(state) if n != list_name)
        when = f"due {due}" if due else "with no due date"
        wording = [f'Add a to-do item titled "{title}" to the {list_name} list, {when}.',
                   f'Put "{title}" on the {list_name} list ({when}).',
                   f'Create a new item "{title}" in the {list_name} list, {when}.'][self.wording(params)]
        spec = all_of(check("item", ITEM.format(title=sql_text(title)), [[list_name, due, 0]]),
                      unchanged("others_unchanged", OTHERS.format(title=sql_text(title)), state))
        first_other = titles(state)[0]

        def add(list_to: str, due_on: str) -> Effect:
            return self.change(asset, lambda store, db: store.add_todo(db, title, list_to, due_on))

        def twice(root: Path) -> None:
            add(list_name, due)(root)
            add(list_name, due)(root)

        def plus_collateral(root: Path) -> None:
            add(list_name, due)(root)
            self.change(asset, lambda store, db: store.delete_todo(db, store.id_of(db, first_other)))(root)

        return TaskDraft(
            title=f"Add the to-do item {title}", instruction=f"{self.where(DESCRIPTION)} {wording}",
            spec=spec, required_literals=[title, list_name] + ([due] if due else []),
            solution=SOLVE_PRELUDE + curl("POST", "api/todos", {"title": title, "list": list_name, "due": due}) + "\n",
            oracle=add(list_name, due),
            failure_cases={"wrong_list": add(other_list, due), "wrong_due": add(list_name, "" if due else "2027-03-15"),
                           "added_twice": twice, "plus_collateral": plus_collateral},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class CompleteItem(TodoFamily):
    """Mark one open item done."""

    name = "gui.todo.complete"
    phrasings = 3

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"title": rng.choice(titles(state, done=False)), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title"], "properties": {"title": {"enum": titles(state, done=False)}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("title") not in titles(state, done=False):
            return missing("open to-do item", params.get("title"), titles(state, done=False))
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        title = params["title"]
        list_name, due, _ = item(state, title)
        wording = [f'Mark the to-do item "{title}" as done.', f'Tick off "{title}": it is finished.',
                   f'The item "{title}" has been completed; mark it done in the app.'][self.wording(params)]
        spec = all_of(check("item", ITEM.format(title=sql_text(title)), [[list_name, due, 1]]),
                      unchanged("others_unchanged", OTHERS.format(title=sql_text(title)), state))
        open_titles = titles(state, done=False)
        other = next(t for t in open_titles if t != title)

        def complete(*which: str) -> Effect:
            return self.change(asset, lambda store, db: [store.update_todo(db, store.id_of(db, t), done=True)
                                                         for t in which])

        same_list = [t for t in open_titles if item(state, t)[0] == list_name]
        return TaskDraft(
            title=f"Complete the to-do item {title}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[title],
            solution=SOLVE_PRELUDE + find_id(title) + curl("POST", "api/todos/$id", {"done": True}) + "\n",
            oracle=complete(title),
            failure_cases={"other_item": complete(other), "whole_list": complete(*same_list) if len(same_list) > 1
                           else complete(title, other),
                           "deleted_instead": self.change(asset, lambda s, db: s.delete_todo(db, s.id_of(db, title)))},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class RenameItem(TodoFamily):
    """Give an item a new title, keeping its list, due date and status."""

    name = "gui.todo.rename"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        taken = set(titles(state))
        return {"title": rng.choice(titles(state)), "new_title": rng.choice([t for t in NEW_TITLES if t not in taken]),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title", "new_title"], "properties": {
            "title": {"enum": titles(state)},
            "new_title": {"type": "string", "minLength": 3, "maxLength": 80, "not": {"enum": titles(state)}}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("title") not in titles(state):
            return missing("to-do item", params.get("title"), titles(state))
        return AddItem().check_params({"title": params.get("new_title"), "list": list_names(state)[0], "due": ""},
                                      asset, state)

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        title, new = params["title"], params["new_title"]
        list_name, due, done = item(state, title)
        wording = [f'Rename the to-do item "{title}" to "{new}".',
                   f'Change the title of "{title}" to "{new}" (keep its list, due date and status).'
                   ][self.wording(params)]
        others = "SELECT list_id, title, due, done FROM todos WHERE title <> {title} ORDER BY id"
        spec = all_of(check("item", ITEM.format(title=sql_text(new)), [[list_name, due, done]]),
                      check("others_unchanged", others.format(title=sql_text(new)),
                            rows(state, others.format(title=sql_text(title)))))
        other = next(t for t in titles(state) if t != title)

        def rename(which: str, also_toggle: bool = False) -> Effect:
            def action(store: Any, db: Any) -> None:
                todo_id = store.id_of(db, which)
                store.update_todo(db, todo_id, title=new, done=(not done) if also_toggle else None)
            return self.change(asset, action)

        return TaskDraft(
            title=f"Rename the to-do item {title}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[title, new],
            solution=SOLVE_PRELUDE + find_id(title) + curl("POST", "api/todos/$id", {"title": new}) + "\n",
            oracle=rename(title),
            failure_cases={"added_new": self.change(asset, lambda s, db: s.add_todo(db, new, list_name, due)),
                           "renamed_other": rename(other), "renamed_and_toggled": rename(title, also_toggle=True)},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class DeleteItem(TodoFamily):
    """Delete one item."""

    name = "gui.todo.delete"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"title": rng.choice(titles(state)), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title"], "properties": {"title": {"enum": titles(state)}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("title") not in titles(state):
            return missing("to-do item", params.get("title"), titles(state))
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        title = params["title"]
        list_name, _, done = item(state, title)
        wording = [f'Delete the to-do item "{title}".',
                   f'"{title}" is no longer needed: remove it from the to-do app.'][self.wording(params)]
        spec = all_of(check("item_gone", f"SELECT count(*) FROM todos WHERE title = {sql_text(title)}", [[0]]),
                      unchanged("others_unchanged", OTHERS.format(title=sql_text(title)), state))
        other = next(t for t in titles(state) if t != title)
        same_list = [t for t in titles(state) if item(state, t)[0] == list_name]

        def delete(*which: str) -> Effect:
            return self.change(asset, lambda store, db: [store.delete_todo(db, store.id_of(db, t)) for t in which])

        toggle = self.change(asset, lambda s, db: s.update_todo(db, s.id_of(db, title), done=not done))
        return TaskDraft(
            title=f"Delete the to-do item {title}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[title],
            solution=SOLVE_PRELUDE + find_id(title) + curl("DELETE", "api/todos/$id") + "\n",
            oracle=delete(title),
            failure_cases={"toggled_instead": toggle, "deleted_other": delete(other),
                           "deleted_whole_list": delete(*same_list)},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class CountItems(TodoFamily):
    """How many items of one list are open (or done): answered on the Answer page."""

    name = "gui.todo.count"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"list": rng.choice(list_names(state)), "status": rng.choice(["open", "done"]),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["list", "status"], "properties": {
            "list": {"enum": list_names(state)}, "status": {"enum": ["open", "done"]}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("list") not in list_names(state):
            return missing("list", params.get("list"), list_names(state))
        if params.get("status") not in ("open", "done"):
            return f"status must be open or done, not {params.get('status')!r}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        list_name, status = params["list"], params["status"]
        in_list = "SELECT done FROM todos t JOIN lists l ON l.id = t.list_id WHERE l.name = ?"
        flags = column(state, in_list, [list_name])
        count = sum(1 for d in flags if d == (status == "done"))
        state_word = "still open (not done)" if status == "open" else "marked done"
        wording = [f"How many items in the {list_name} list are {state_word}?",
                   f"Count the to-do items of the {list_name} list that are {state_word}."][self.wording(params)]
        instruction = (f"{self.where(DESCRIPTION)} {wording} Submit just the number on the app's Answer page "
                       "(only your latest answer counts).")
        every_item = "SELECT id, list_id, title, due, done FROM todos ORDER BY id"
        spec = all_of(answer_check(str(count)), unchanged("items_unchanged", every_item, state))
        wrong = len(flags) if len(flags) != count else count + 1
        open_title = titles(state, done=False)[0]

        def answer(text: str) -> Effect:
            return lambda root: record_answer(root, asset, text)

        def right_but_completed(root: Path) -> None:
            answer(str(count))(root)
            self.change(asset, lambda s, db: s.update_todo(db, s.id_of(db, open_title), done=True))(root)

        solution = (SOLVE_PRELUDE + f"n=$({curl('GET', f'api/todos?list={query_param(list_name)}&status={status}')}"
                    " | jq length)\n" + submit_answer("n"))
        return TaskDraft(
            title=f"Count the {status} items of {list_name}", instruction=instruction, spec=spec,
            required_literals=[list_name], solution=solution, oracle=answer(str(count)),
            failure_cases={"wrong_count": answer(str(wrong)), "right_but_completed": right_but_completed},
            difficulty="medium", needed_actions=NEEDED_ACTIONS)
