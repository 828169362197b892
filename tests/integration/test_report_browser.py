"""forge report on a real run, opened in Debian's headless Chromium: it renders with no console or page
errors, requests nothing but itself, and its trajectory viewer opens from the rollout list.

The run is real and small: ``forge eval`` in Docker with the nop and oracle harnesses and the react
harness, whose model is the in-run proxy's scripted engine (real proxy, real tokenizer, real
trajectories; no vLLM). Chromium runs in the gui test image (gui template + Playwright, see
conftest) with no network, the report mounted read-only; the screenshots it takes are copied out
and checked here.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import forge_cli

from openforgerl.testing.tasks import write_task

pytestmark = pytest.mark.docker

IMAGE = "openforgerl/test-report-browser:latest"
VIEWPORT = (1280, 900)
TURNS = [  # the react agent: a failing command, the write, a check, done
    {"tool_calls": [{"name": "shell", "arguments": {"command": "cat /app/missing.txt"}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "/app/hello.txt", "content": "hi"}}]},
    {"text": "Checking the file.", "tool_calls": [{"name": "shell", "arguments": {"command": "cat /app/hello.txt"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
]
SHOOT = """
import json, os, sys
from playwright.sync_api import sync_playwright

ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
url, anchor, width, height = "file:///report/report.html", sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen = {"errors": [], "requests": []}
os.makedirs("/out")
with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.on("console", lambda m: seen["errors"].append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(f"page error: {e}"))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.goto(url, wait_until="load")
    seen["overview_visible"] = page.is_visible("#overview")
    page.screenshot(path="/out/overview.png")
    page.click(f'#rollout-list a[href="#{anchor}"]')
    viewer = page.locator(f'section.viewer[id="{anchor}"]')
    viewer.wait_for(state="visible", timeout=5000)
    seen["overview_visible_in_viewer"] = page.is_visible("#overview")
    seen["viewer_calls"] = viewer.locator("article.call").count()
    page.screenshot(path="/out/viewer.png")  # the viewer's top, where routing scrolled to
    token = viewer.locator("pre.tokens i").first
    token.hover()
    seen["token_title"] = token.get_attribute("title")
    page.go_back()
    page.wait_for_selector("#overview", state="visible", timeout=5000)
    browser.close()
json.dump(seen, open("/out/seen.json", "w"))
"""


@pytest.fixture(scope="module")
def browser_image(gui_playwright_image) -> str:
    return gui_playwright_image(IMAGE, {"index.html": "<!doctype html><title>report test</title>\n"})


def real_eval(tmp_path: Path) -> Path:
    task = write_task(tmp_path / "tasks", "hello")
    config = tmp_path / "eval.yaml"
    # concurrency 1: the scripted engine answers in order, so each react rollout gets the whole script
    config.write_text(yaml.safe_dump({"proxy": {"engine": {"type": "scripted", "turns": TURNS}}, "concurrency": 1}))
    run_dir = tmp_path / "eval"
    done = forge_cli("eval", str(task), "--config", str(config), "--harness", "nop,oracle,react", "-n", "2",
                     "-k", "1,2", "--run-dir", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def shoot(image: str, report: Path, anchor: str, out: Path) -> dict:
    """Run SHOOT in a container without network, the report's directory (and SHOOT beside it) mounted
    read-only; copy /out back into ``out``."""
    from openforgerl.containers.client import docker_client

    (report.parent / "shoot.py").write_text(SHOOT)
    client = docker_client()
    command = ["python3", "/report/shoot.py", anchor, *map(str, VIEWPORT)]
    container = client.containers.run(image, command, entrypoint=[], detach=True, network_mode="none",
                                      working_dir="/tmp", user="root",
                                      volumes={str(report.parent): {"bind": "/report", "mode": "ro"}},
                                      labels={"openforgerl.test": "report-browser"})
    try:
        status = container.wait(timeout=120)
        logs = container.logs().decode(errors="replace")
        assert status["StatusCode"] == 0, logs[-3000:]
        stream, _ = container.get_archive("/out")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extractall(out, filter="data")
    finally:
        container.remove(force=True)
    return json.loads((out / "out" / "seen.json").read_text())


def test_the_report_of_a_real_run_renders_in_chromium_and_opens_a_trajectory(tmp_path: Path, browser_image: str):
    PIL = pytest.importorskip("PIL.Image")
    ImageChops = pytest.importorskip("PIL.ImageChops")
    run_dir = real_eval(tmp_path)
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    made = forge_cli("report", str(run_dir), "--out", str(report_dir / "report.html"), timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    assert made.stdout.strip().splitlines()[-1] == str(report_dir / "report.html")
    react = [json.loads(line) for line in (run_dir / "react" / "rollouts.jsonl").read_text().splitlines()]
    assert [r["status"] for r in react] == ["success", "success"], react
    html = (report_dir / "report.html").read_text()
    assert html.count('class="viewer"') == 6 and "Token colouring needs" not in html  # the real tokenizer

    anchor = f"rollout/{react[0]['rollout_id']}"
    seen = shoot(browser_image, report_dir / "report.html", anchor, tmp_path / "shots")
    assert seen["errors"] == []
    assert all(url.startswith(("file:///report/", "data:")) for url in seen["requests"]), seen["requests"]
    assert seen["overview_visible"] and not seen["overview_visible_in_viewer"]
    assert seen["viewer_calls"] == len(TURNS) and float(seen["token_title"].split(",")[0]) <= 0

    overview, viewer = (PIL.open(tmp_path / "shots" / "out" / f"{name}.png") for name in ("overview", "viewer"))
    for shot in (overview, viewer):
        assert shot.format == "PNG" and shot.size == VIEWPORT
        colours = shot.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50, "a blank or nearly blank screenshot"
    unchanged = ImageChops.difference(overview.convert("RGB"), viewer.convert("RGB")).convert("L").histogram()[0]
    changed = VIEWPORT[0] * VIEWPORT[1] - unchanged
    assert changed > 0.05 * VIEWPORT[0] * VIEWPORT[1], "the viewer looks like the overview"
