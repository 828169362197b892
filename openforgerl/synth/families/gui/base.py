"""What the gui families share: the app's own data module, SQL checks against the seed, solve.sh pieces.

A gui asset is a web app (``openforgerl/synth/bundled/gui/<app>/webapp``) whose state is one SQLite
database, ``/var/lib/webapp/app.db``. Its ``store.py`` holds every change the app makes; the families
load it from the asset and apply the same functions to a host copy of the state (the oracle and the
failure cases), so a reference effect is exactly what the app's handlers would do.

Invariant: every verifier is ``all`` of read-only ``sqlite`` checks — the rows the task asks for, and
the rows it must leave alone compared with the seed (collateral damage) — so the host dry run and the
container judge the same rows, and doing nothing never passes.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.family import Family

DATABASE = "/var/lib/webapp/app.db"
URL_FILE = "/run/forge-webapp/url"
NEEDED_ACTIONS = ["browse", "observe"]
"""A browser agent clicks and types (browse) and opens pages (observe)."""
ANSWER_QUERY = "SELECT lower(trim(answer)) FROM answers ORDER BY id DESC LIMIT 1"
_MODULES: dict[tuple[str, str], ModuleType] = {}


def app_module(asset: Asset, name: str) -> ModuleType:
    """``<asset>/webapp/<name>.py`` (stdlib only), loaded once per file."""
    path = (asset.root / "webapp" / f"{name}.py").resolve()
    key = (str(path), name)
    if key not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"forge_gui_{asset.name}_{name}", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[key] = module
    return _MODULES[key]


def database_file(root: Path) -> Path:
    return root / DATABASE.lstrip("/")


@contextmanager
def database(root: Path) -> Iterator[sqlite3.Connection]:
    """The app's database under ``root``, committed when the block ends normally (as a request is)."""
    with closing(sqlite3.connect(database_file(root))) as db:
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = OFF")  # a throwaway copy: no need to wait for the disk
        yield db
        db.commit()


def rows(state: Path, query: str, params: Sequence[Any] = ()) -> list[list[Any]]:
    """A query's rows on the starting state (read-only)."""
    with closing(sqlite3.connect(f"file:{database_file(state)}?mode=ro", uri=True)) as db:
        return [list(row) for row in db.execute(query, tuple(params))]


def column(state: Path, query: str, params: Sequence[Any] = ()) -> list[Any]:
    return [row[0] for row in rows(state, query, params)]


def sql_text(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def check(name: str, query: str, expect_rows: list[list[Any]]) -> dict[str, Any]:
    return {"type": "sqlite", "name": name, "database": DATABASE, "query": query, "expect_rows": expect_rows}


def unchanged(name: str, query: str, state: Path) -> dict[str, Any]:
    """The rows ``query`` selects must be exactly what they are in the seed (no collateral damage)."""
    return check(name, query, rows(state, query))


def answer_check(expected: str) -> dict[str, Any]:
    """The latest answer submitted on the app's Answer page, compared without case or outer spaces."""
    return check("answer", ANSWER_QUERY, [[str(expected).strip().lower()]])


def all_of(*checks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "all", "checks": list(checks)}


def record_answer(root: Path, asset: Asset, text: str) -> None:
    with database(root) as db:
        app_module(asset, "webkit").record_answer(db, text)


# ---- solve.sh: the agent's user, curl and jq against the app's JSON API ----------------------------

SOLVE_PRELUDE = "url=$(forge-webapp)  # waits until the app serves, then prints its address\n"


def curl(method: str, path: str, payload: dict[str, Any] | None = None) -> str:
    """One API call; ``path`` may hold shell expansions (``$id``) but no quotes."""
    parts = ["curl -fsS", f"-X {method}"]
    if payload is not None:
        parts += ["-H 'Content-Type: application/json'", f"--data-binary {shlex.quote(json.dumps(payload))}"]
    return " ".join(parts) + f' "${{url}}{path.lstrip("/")}"'


def submit_answer(variable: str) -> str:
    """Post the shell variable ``$variable`` as the answer."""
    return (f'jq -n --arg answer "${variable}" \'{{answer: $answer}}\' | curl -fsS -X POST '
            f"-H 'Content-Type: application/json' --data-binary @- \"${{url}}api/answer\"\n")


def query_param(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


class GuiFamily(Family):
    """A task on one bundled web app (``app``: the asset's name)."""

    domain = "gui"
    app: ClassVar[str]
    phrasings: ClassVar[int] = 1
    """How many wordings ``render`` knows; ``sample`` picks one (it is not part of the task's identity)."""

    def pick_phrasing(self, rng: random.Random) -> int:
        return rng.randrange(self.phrasings)

    def wording(self, params: dict[str, Any]) -> int:
        """The wording ``render`` uses: ``params["phrasing"]`` when it names one (an int, or its digits as an
        LLM proposer may write them), else the first. A wording is never a reason to reject a task."""
        try:
            index = int(params.get("phrasing", 0))
        except (TypeError, ValueError):
            return 0
        return index if 0 <= index < self.phrasings else 0

    def signature(self, params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k != "phrasing"}

    def where(self, description: str) -> str:
        return f"The {description} web app is open in the browser (its address is in {URL_FILE})."


def missing(kind: str, value: Any, known: Sequence[Any], limit: int = 8) -> str:
    """One sentence: ``value`` is not among the ``known`` entities of its kind."""
    shown = ", ".join(repr(k) for k in list(known)[:limit]) + (", ..." if len(known) > limit else "")
    return f"there is no {kind} {value!r} in the app (there are: {shown})"
