"""`forge synth --domain gui` end to end: ten tasks over the four bundled web apps, built and validated by
the real build-env (nop 0, oracle 1 in real containers), then the browser harness on a synthesised task:
it sees the server-rendered app, scores 0 doing nothing and 1 after filling and submitting the real form.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from conftest import forge_cli

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts

pytestmark = [pytest.mark.docker, pytest.mark.harness]

MIN_PASSING = 9


def synth(out: Path, *args: str) -> list[dict]:
    done = forge_cli("synth", "--domain", "gui", "--out", str(out), *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_ten_synthesised_gui_tasks_pass_build_env(tmp_path: Path):
    rows = synth(tmp_path / "synth", "-n", "10", "--seed", "1")
    report = json.loads((tmp_path / "synth" / "synth_report.json").read_text())
    passed = [row for row in rows if row["validation"]["passed"]]
    assert len(passed) >= MIN_PASSING, [(r["task"], r["validation"]) for r in rows]
    assert report["kept"] == len(passed)
    assert {row["task"].split("-")[1] for row in rows} >= {"todo", "shop", "booking", "contacts"}
    assert len({row["image"] for row in passed}) == 4  # one image per web app, shared by its tasks
    for image in {row["image"] for row in passed}:
        assert agent_tampering(image) == ["database: denied", "seed program: denied"], image


TAMPER = """
import sqlite3
for what, attempt in [("database", lambda: sqlite3.connect("/var/lib/webapp/app.db").execute("PRAGMA user_version=7")),
                      ("seed program", lambda: open("/srv/webapp/seed.py").read())]:
    try:
        attempt()
        print(what + ": done")
    except (OSError, sqlite3.Error):
        print(what + ": denied")
"""


def agent_tampering(image: str) -> list[str]:
    """What the agent user gets trying to change the app's state behind its back, or to read its seeder."""
    import docker

    out = docker.from_env().containers.run(image, ["python3", "-c", TAMPER], entrypoint=[], user="1000:1000",
                                           network_mode="none", remove=True)
    return out.decode().split("\n")[:-1]


@pytest.fixture(scope="module")
def browser_installed() -> None:
    from openforgerl.rollout.harnesses.install import install

    install("browser", lambda action: None)  # a no-op when the pinned version is already there


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def browse(manifest: Path, run_dir: Path, turns: list[dict]) -> tuple[object, list[dict]]:
    config = RolloutConfig(tasks=[str(manifest)], harness="browser", attempts=1, concurrency=1, run_dir=str(run_dir),
                           agent_user="1000:1000", proxy=ProxySettings(engine={"type": "scripted", "turns": turns}))
    out, results = asyncio.run(run_rollouts(config))
    [result] = results
    messages = json.loads((out / "logs" / result.rollout_id / "logs" / "agent" / "browser-messages.json").read_text())
    return result, messages


def ref(page: str, role: str, name: str) -> int:
    found = re.search(rf'\[(\d+)\] {role} "{re.escape(name)}"', page)
    assert found, f'no {role} "{name}" on the page:\n{page[:3000]}'
    return int(found.group(1))


def test_the_browser_harness_adds_the_item_through_the_apps_form(tmp_path: Path, browser_installed: None):
    synth(tmp_path / "synth", "--family", "gui.todo.add", "-n", "1", "--seed", "3")
    manifest = tmp_path / "synth" / "manifest.jsonl"
    idle, messages = browse(manifest, tmp_path / "idle", [call("done")])
    assert (idle.status, idle.reward) == ("failure", 0.0)  # type: ignore[attr-defined]
    page = messages[1]["content"]
    title, list_name = re.search(r'new item "([^"]+)" in the (\w+) list', page).groups()  # type: ignore[union-attr]
    assert "Title: To-do" in page and f'option "{list_name}"' in page  # the server-rendered app, seeded

    turns = [call("type", ref=ref(page, "textbox", "Title"), text=title),
             call("type", ref=ref(page, "combobox", "List"), text=list_name),
             call("click", ref=ref(page, "button", "Add item")), call("done", message="added")]
    added, messages = browse(manifest, tmp_path / "added", turns)
    assert (added.status, added.reward) == ("success", 1.0), added  # type: ignore[attr-defined]
    clicked = [m["content"] for m in messages if m["role"] == "tool"][2]
    before = int(re.search(r'table "All items \((\d+)\)"', page).group(1))  # type: ignore[union-attr]
    assert f'table "All items ({before + 1})"' in clicked  # after the click the model sees one more item
