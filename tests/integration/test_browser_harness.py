"""The browser harness end to end: the gui image (Debian's Chromium + a served form), forge-browser in its
harness layer, the real in-run proxy with a scripted engine, and the task's verifier reading what the
app received. Right actions fill and submit the form (reward 1); wrong ones do not (reward 0).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path

import jinja2
import pytest

from openforgerl.rollout.orchestrator import RolloutConfig
from openforgerl.rollout.proxy_handle import ProxySettings
from openforgerl.rollout.run import run_rollouts

pytestmark = [pytest.mark.docker, pytest.mark.harness]

GUI_IMAGE = "openforgerl/test-gui:latest"
HASH_LABEL = "openforgerl.test-gui-context"
TEMPLATE = Path(__file__).parents[2] / "openforgerl" / "templates" / "env" / "gui"

INDEX_HTML = """<!doctype html>
<html><head><title>Newsletter</title></head><body>
<h1>Newsletter</h1>
<form action="thanks.html" method="get">
  <label for="name">Name</label> <input id="name" name="name" type="text">
  <label for="email">Email</label> <input id="email" name="email" type="email">
  <button type="submit">Subscribe</button>
</form>
</body></html>
"""
THANKS_HTML = "<!doctype html><html><head><title>Thanks</title></head><body><h1>Thanks for subscribing!</h1></body></html>\n"

# The verifier reads the app's request log (root's file): what the browser submitted, not what the agent says.
TEST_SH = r"""#!/bin/bash
python3 - <<'EOF'
import json, re, urllib.parse
submitted = [urllib.parse.parse_qs(m.group(1)) for m in
             re.finditer(r'"GET /thanks\.html\?(\S*) HTTP', open("/var/log/webapp/access.log").read())]
ok = any(s.get("name") == ["Ada Lovelace"] and s.get("email") == ["ada@example.org"] for s in submitted)
json.dump({"reward": 1.0 if ok else 0.0, "submissions": len(submitted)}, open("/logs/verifier/reward.json", "w"))
EOF
"""

# Refs as forge-browser numbers the form: [1] heading, [2] Name, [3] Email, [4] Subscribe.
RIGHT = [
    {"tool_calls": [{"name": "type", "arguments": {"ref": 2, "text": "Ada Lovelace"}}]},
    {"tool_calls": [{"name": "type", "arguments": {"ref": "3", "text": "ada@example.org"}}]},
    {"tool_calls": [{"name": "click", "arguments": {"ref": 4}}]},
    {"tool_calls": [{"name": "done", "arguments": {"message": "subscribed"}}]},
]
WRONG = [
    {"tool_calls": [{"name": "goto", "arguments": {"url": "https://example.com/"}}]},
    {"tool_calls": [{"name": "click", "arguments": {"ref": 99}}]},
    {"tool_calls": [{"name": "type", "arguments": {"ref": 2, "text": "Charles Babbage", "submit": True}}]},
    {"tool_calls": [{"name": "done", "arguments": {}}]},
]


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


def context_hash(context: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


@pytest.fixture(scope="module")
def gui_image(tmp_path_factory) -> str:
    """openforgerl/test-gui:latest, rebuilt only when the template or the page changed."""
    import docker.errors

    from openforgerl.envs.docker_engine import docker_client

    client = docker_client()
    context = build_context(tmp_path_factory.mktemp("gui-context"))
    key = context_hash(context)
    try:
        if client.images.get(GUI_IMAGE).labels.get(HASH_LABEL) == key:
            return GUI_IMAGE
    except docker.errors.ImageNotFound:
        pass
    client.images.build(path=str(context), tag=GUI_IMAGE, network_mode="host", rm=True, forcerm=True,
                        labels={HASH_LABEL: key})
    return GUI_IMAGE


@pytest.fixture(scope="module")
def browser_installed() -> None:
    from openforgerl.rollout.harnesses.install import install

    install("browser", lambda action: None)  # a no-op when the pinned version is already there


def make_task(root: Path, image: str) -> Path:
    task = root / "newsletter"
    for sub in ("tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(f'[task]\nname = "newsletter"\ndomain = "gui"\n[agent]\ntimeout_sec = 180\n'
                                    f'[environment]\ndocker_image = "{image}"\n')
    (task / "instruction.md").write_text("Subscribe Ada Lovelace (ada@example.org) to the newsletter.\n")
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncurl -fsS \"$(forge-webapp)thanks.html?name=Ada+Lovelace&email=ada%40example.org\"\n")
    return task


def rollout(tmp_path: Path, image: str, turns: list[dict], **options):
    config = RolloutConfig(tasks=[str(make_task(tmp_path, image))], harness="browser", harness_options=options,
                           concurrency=1, run_dir=str(tmp_path / "run"), agent_user="1000:1000",
                           proxy=ProxySettings(engine={"type": "scripted", "turns": turns}))
    run_dir, results = asyncio.run(run_rollouts(config))
    assert len(results) == 1
    logs = run_dir / "logs" / results[0].rollout_id
    messages = json.loads((logs / "logs" / "agent" / "browser-messages.json").read_text())
    return results[0], messages, logs


def tool_texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_right_actions_fill_and_submit_the_form(tmp_path: Path, gui_image: str, browser_installed: None):
    result, messages, _ = rollout(tmp_path, gui_image, RIGHT, screenshots=True)
    assert (result.status, result.reward, result.metrics) == ("success", 1.0, {"submissions": 1})
    assert result.model_usage["calls"] == 4
    first_page = messages[1]["content"]
    assert "Subscribe Ada Lovelace" in first_page and '[2] textbox "Name"' in first_page
    typed, _, clicked, _ = tool_texts(messages)
    assert typed.startswith("typed 'Ada Lovelace' into [2]") and '[2] textbox "Name": Ada Lovelace' in typed
    assert "Title: Thanks" in clicked and "Thanks for subscribing!" in clicked  # the model sees the new page


def test_wrong_actions_get_reward_0_and_errors_the_model_can_read(tmp_path: Path, gui_image: str,
                                                                   browser_installed: None):
    result, messages, _ = rollout(tmp_path, gui_image, WRONG)
    assert (result.status, result.reward, result.metrics) == ("failure", 0.0, {"submissions": 1})
    outside, missing, typed, _ = tool_texts(messages)
    assert "not reachable: only loopback hosts" in outside and "URL: http://127.0.0.1:" in outside
    assert missing.startswith("error: there is no element [99] (elements: 1-4)")
    assert "pressed Enter" in typed and "Title: Thanks" in typed


def test_vision_mode_sends_screenshots_as_image_parts(tmp_path: Path, gui_image: str, browser_installed: None):
    result, messages, logs = rollout(tmp_path, gui_image, RIGHT, vision=True, screenshots=True)
    assert (result.status, result.reward) == ("success", 1.0)
    images = [part for m in messages if isinstance(m["content"], list) for part in m["content"]
              if part.get("type") == "image_url"]
    assert len(images) == 4  # the first page and after each of the three actions
    shots = sorted((logs / "logs" / "agent" / "screenshots").glob("step-*.png"))
    assert len(shots) == 4 and all(s.read_bytes().startswith(b"\x89PNG") for s in shots)
