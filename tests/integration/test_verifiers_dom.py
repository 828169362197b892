"""The DOM / accessibility-tree verifier in a real gui image: Debian's Chromium driven by Playwright.

The image is the gui template (rendered as the browser harness's tests render it) plus the
playwright package copied from this test's own environment (the verifier needs it inside the
image; the browser harness's copy lives in its harness layer, which nop/oracle runs do not get).
The web app renders its state with JavaScript, so only a real browser sees what the agent did.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.tasks import write_task
from openforgerl.verifiers import compile_verifier

pytestmark = pytest.mark.docker

IMAGE = "openforgerl/test-gui-verifier:latest"

INDEX_HTML = """<!doctype html>
<html><head><title>Orders</title></head><body>
<h1 id="status">Loading</h1>
<ul id="items"></ul>
<script>
fetch("state.json", {cache: "no-store"}).then(r => r.json()).then(state => {
  document.getElementById("status").textContent = state.status;
  for (const item of state.items) {
    const li = document.createElement("li");
    li.className = "item";
    li.textContent = item;
    document.getElementById("items").appendChild(li);
  }
  document.body.dataset.loaded = "yes";
});
</script>
</body></html>
"""
STATE = {"status": "Pending", "items": []}

VERIFIER = {
    "type": "all",
    "checks": [
        {"type": "dom", "name": "status", "url": "/", "base_url_file": "/run/forge-webapp/url",
         "wait_for": "body[data-loaded]", "selector": "#status", "text_equals": "Shipped"},
        {"type": "dom", "name": "items", "url": "/", "base_url_file": "/run/forge-webapp/url",
         "wait_for": "body[data-loaded]", "selector": "li.item", "count": 2,
         "aria_contains": ['- listitem: apple', '- listitem: pear']},
        {"type": "dom", "name": "a11y", "url": "/", "base_url_file": "/run/forge-webapp/url",
         "wait_for": "body[data-loaded]", "aria_contains": ['- heading "Shipped" [level=1]']},
    ],
}
SOLVE = """#!/bin/bash
printf '{"status": "Shipped", "items": ["apple", "pear"]}' > /srv/webapp/state.json
"""


@pytest.fixture(scope="module")
def gui_image(gui_playwright_image) -> str:
    """The gui template + playwright serving this test's app (built once per content, see conftest)."""
    return gui_playwright_image(IMAGE, {"index.html": INDEX_HTML, "state.json": json.dumps(STATE)})


def make_task(root: Path, image: str) -> Path:
    # the reference solution edits the app's root-owned state directly: the task says it runs as root
    task = write_task(root, "orders", domain="gui", image=image, verifier_timeout=120, dockerfile=None, test_sh=None,
                      instruction="Ship the order: it must show status Shipped with apple and pear.\n", solution=SOLVE,
                      tables={"agent": {"user": "root"}})
    compile_verifier(VERIFIER, task / "tests")
    return task


def rollout(tmp_path: Path, task: Path, harness: str):
    config = RolloutConfig(tasks=[str(task)], harness=harness, concurrency=1, run_dir=str(tmp_path / harness))
    _, results = asyncio.run(run_rollouts(config))
    assert len(results) == 1
    return results[0]


def test_dom_and_accessibility_checks_see_the_rendered_state(tmp_path: Path, gui_image: str):
    task = make_task(tmp_path, gui_image)
    oracle = rollout(tmp_path, task, "oracle")
    assert (oracle.status, oracle.reward) == ("success", 1.0), json.dumps(oracle.metrics)[:3000] + oracle.reason
    assert oracle.metrics["checks"]["items"]["count"] == 2

    nop = rollout(tmp_path, task, "nop")
    assert (nop.status, nop.reward) == ("failure", 0.0), nop.reason
    checks = nop.metrics["checks"]
    assert checks["status"]["text"] == "Pending" and checks["items"]["count"] == 0
    assert checks["a11y"]["aria_missing"] == ['- heading "Shipped" [level=1]']
