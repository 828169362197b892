"""The browser harness end to end: the gui image (Debian's Chromium + a served form), forge-browser in its
harness layer, the real in-run proxy with a scripted engine, and the task's verifier reading what the
app received. Right actions fill and submit the form (reward 1); wrong ones do not (reward 0).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import jinja2
import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts
from openforgerl.testing.tasks import write_task

pytestmark = [pytest.mark.docker, pytest.mark.harness]

GUI_IMAGE = "openforgerl/test-gui:latest"
TEMPLATE = Path(__file__).parents[2] / "openforgerl" / "templates" / "env" / "gui"

INDEX_HTML = """<!doctype html>
<html><head><title>Newsletter</title></head><body>
<h1>Newsletter</h1>
<form action="thanks.html" method="get">
  <label for="name">Name</label> <input id="name" name="name" type="text">
  <label for="email">Email</label> <input id="email" name="email" type="email">
  <label for="frequency">Frequency</label>
  <select id="frequency" name="frequency"><option>weekly</option><option>monthly</option></select>
  <button type="submit">Subscribe</button>
</form>
</body></html>
"""
THANKS_HTML = ("<!doctype html><html><head><title>Thanks</title></head>"
               "<body><h1>Thanks for subscribing!</h1></body></html>\n")

# The verifier reads the app's request log (root's file): what the browser submitted, not what the agent says.
TEST_SH = r"""#!/bin/bash
python3 - <<'EOF'
import json, re, urllib.parse
submitted = [urllib.parse.parse_qs(m.group(1)) for m in
             re.finditer(r'"GET /thanks\.html\?(\S*) HTTP', open("/var/log/webapp/access.log").read())]
wanted = {"name": ["Ada Lovelace"], "email": ["ada@example.org"], "frequency": ["monthly"]}
ok = wanted in submitted
json.dump({"reward": 1.0 if ok else 0.0, "submissions": len(submitted)}, open("/logs/verifier/reward.json", "w"))
EOF
"""


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# Refs as forge-browser numbers the form: [1] heading, [2] Name, [3] Email, [4] Frequency (a drop-down:
# [5] weekly, [6] monthly), [7] Subscribe.
RIGHT = [call("type", ref=2, text="Ada Lovelace"), call("type", ref="3", text="ada@example.org"),
         call("type", ref=4, text="monthly"), call("click", ref=7), call("done", message="subscribed")]
RIGHT_BY_OPTION = [*RIGHT[:2], call("click", ref=6), *RIGHT[3:]]
# One turn holding every call: the scripted engine's turns are shared by concurrent rollouts.
RIGHT_IN_ONE_TURN = [{"tool_calls": [c for turn in RIGHT_BY_OPTION for c in turn["tool_calls"]]}]
WRONG = [call("goto", url="https://example.com/"), call("click", ref=99), call("type", ref=4, text="yearly"),
         call("type", ref=2, text="Charles Babbage", submit=True), call("done")]


def build_context(dest: Path) -> Path:
    """The gui template rendered with the form page as the task's web app."""
    dest.mkdir(parents=True, exist_ok=True)
    jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE)), keep_trailing_newline=True)
    (dest / "Dockerfile").write_text(jinja.get_template("Dockerfile.jinja").render())
    shutil.copy(TEMPLATE / "forge_webapp.py", dest / "forge_webapp.py")
    (dest / "webapp").mkdir(exist_ok=True)
    (dest / "webapp" / "index.html").write_text(INDEX_HTML)
    (dest / "webapp" / "thanks.html").write_text(THANKS_HTML)
    return dest


@pytest.fixture(scope="module")
def gui_image(tmp_path_factory, build_cached) -> str:
    """openforgerl/test-gui:latest, rebuilt only when the template or the page changed."""
    return build_cached(build_context(tmp_path_factory.mktemp("gui-context")), GUI_IMAGE)


@pytest.fixture(scope="module")
def browser_installed() -> None:
    from openforgerl.rollout.harnesses.install import install

    # A no-op when this checkout's forge-browser is installed; an edited agent changes the install's
    # fingerprint, so it is reinstalled and its layer rebuilt (the old one then removed).
    install("browser", lambda action: None)


def make_task(root: Path, image: str) -> Path:
    solve = ("#!/bin/bash\nset -e\napp=$(forge-webapp)\n"
             "curl -fsS \"${app}thanks.html?name=Ada+Lovelace&email=ada%40example.org&frequency=monthly\"\n")
    return write_task(root, "newsletter", domain="gui", agent_timeout=180, image=image, dockerfile=None,
                      instruction="Subscribe Ada Lovelace (ada@example.org) to the newsletter.\n", test_sh=TEST_SH,
                      solution=solve)


def run(tmp_path: Path, image: str, harness: str, turns: list[dict] | None = None, attempts: int = 1,
        **options) -> tuple[Path, list]:
    config = RolloutConfig(tasks=[str(make_task(tmp_path, image))], harness=harness, harness_options=options,
                           attempts=attempts, concurrency=attempts, run_dir=str(tmp_path / "run"),
                           agent_user="1000:1000",
                           proxy=ProxySettings(engine={"type": "scripted", "turns": turns or [call("done")]}))
    run_dir, results = asyncio.run(run_rollouts(config))
    assert len(results) == attempts
    return run_dir, results


def rollout(tmp_path: Path, image: str, turns: list[dict], **options):
    run_dir, results = run(tmp_path, image, "browser", turns, **options)
    logs = run_dir / "logs" / results[0].rollout_id
    messages = json.loads((logs / "logs" / "agent" / "browser-messages.json").read_text())
    return results[0], messages, logs


def tool_texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_the_environment_is_valid_nop_scores_0_and_the_oracle_1(tmp_path: Path, gui_image: str):
    _, nop = run(tmp_path / "nop", gui_image, "nop")
    _, oracle = run(tmp_path / "oracle", gui_image, "oracle")
    assert (nop[0].reward, nop[0].metrics) == (0.0, {"submissions": 0})
    assert (oracle[0].status, oracle[0].reward) == ("success", 1.0)  # the app serves from container start


def test_right_actions_fill_and_submit_the_form(tmp_path: Path, gui_image: str, browser_installed: None):
    result, messages, _ = rollout(tmp_path, gui_image, RIGHT)
    assert (result.status, result.reward, result.metrics) == ("success", 1.0, {"submissions": 1})
    assert result.model_usage["calls"] == 5
    first_page = messages[1]["content"]
    assert "Subscribe Ada Lovelace" in first_page and '[2] textbox "Name"' in first_page
    typed, _, chosen, clicked, _ = tool_texts(messages)
    assert typed.startswith("typed 'Ada Lovelace' into [2]") and '[2] textbox "Name": Ada Lovelace' in typed
    assert chosen.startswith("chose 'monthly' in [4]") and '[6] option "monthly" [selected]' in chosen
    assert "Title: Thanks" in clicked and "Thanks for subscribing!" in clicked  # the model sees the new page


def test_concurrent_rollouts_each_get_their_own_app(tmp_path: Path, gui_image: str, browser_installed: None):
    run_dir, results = run(tmp_path, gui_image, "browser", RIGHT_IN_ONE_TURN, attempts=2)
    assert [(r.status, r.reward, r.model_usage["calls"]) for r in results] == [("success", 1.0, 1)] * 2
    starts = {(run_dir / "logs" / r.rollout_id / "agent.stdout").read_text().splitlines()[0] for r in results}
    assert len(starts) == 2 and all(s.startswith("[start] opened http://127.0.0.1:") for s in starts)


def test_wrong_actions_get_reward_0_and_errors_the_model_can_read(tmp_path: Path, gui_image: str,
                                                                   browser_installed: None):
    result, messages, _ = rollout(tmp_path, gui_image, WRONG)
    assert (result.status, result.reward, result.metrics) == ("failure", 0.0, {"submissions": 1})
    outside, missing, no_option, typed, _ = tool_texts(messages)
    assert "not reachable: only loopback hosts" in outside and "URL: http://127.0.0.1:" in outside
    assert missing.startswith("error: there is no element [99] (elements: 1-7)")
    assert no_option.startswith("error: [4] has no option 'yearly'; its options: 'weekly', 'monthly'")
    assert "pressed Enter" in typed and "Title: Thanks" in typed


def test_vision_mode_sends_screenshots_as_image_parts(tmp_path: Path, gui_image: str, browser_installed: None):
    result, messages, logs = rollout(tmp_path, gui_image, RIGHT_BY_OPTION, vision=True, screenshots=True)
    assert (result.status, result.reward) == ("success", 1.0)
    images = [part for m in messages if isinstance(m["content"], list) for part in m["content"]
              if part.get("type") == "image_url"]
    assert len(images) == 5  # the first page and after each of the four actions
    shots = sorted((logs / "logs" / "agent" / "screenshots").glob("step-*.png"))
    assert len(shots) == 5 and all(s.read_bytes().startswith(b"\x89PNG") for s in shots)
