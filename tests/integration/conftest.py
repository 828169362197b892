"""Fixtures for tests that use real parts: one vLLM server for the whole session, images built once
per content (a gui image with Playwright among them)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GUI_TEMPLATE = Path(__file__).parents[2] / "openforgerl" / "templates" / "env" / "gui"
GUI_SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages/"


def forge_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforgerl", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def vllm_base_url():
    """vLLM serving SmolLM2 through the real `forge serve` (reused when already running, then left as found)."""
    from openforgerl.serving import vllm

    pulled = forge_cli("model", "pull", "smollm2")
    assert pulled.returncode == 0, pulled.stderr
    already = vllm.running_server() is not None
    started = forge_cli("serve", "--model", "smollm2")
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    yield url
    if not already:
        forge_cli("serve", "--stop")


@pytest.fixture(scope="session")
def build_cached():
    """build(context_dir, tag) -> tag: a docker build, skipped when the tag was built from the same bytes."""
    import docker.errors

    from openforgerl.containers.client import docker_client
    from openforgerl.containers.images import environment_hash

    client = docker_client()

    def build(context, tag: str) -> str:
        key = environment_hash(context)
        try:
            if client.images.get(tag).labels.get("openforgerl.test-context") == key:
                return tag
        except docker.errors.ImageNotFound:
            pass
        client.images.build(path=str(context), tag=tag, network_mode="host", rm=True, forcerm=True, pull=False,
                            labels={"openforgerl.test-context": key})
        return tag

    return build


def playwright_packages() -> list[Path]:
    found = [importlib.util.find_spec(name) for name in ("playwright", "greenlet")]
    if not all(spec and spec.origin for spec in found):
        pytest.skip('the playwright package is not installed here (pip install "openforgerl[gui]")')
    return [Path(spec.origin).parent for spec in found if spec and spec.origin]


def gui_context(dest: Path, webapp: dict[str, str]) -> Path:
    """The gui template (Debian's Chromium; rendered as the browser harness's tests render it) serving
    ``webapp`` (file name -> text), plus the playwright package copied from this test environment."""
    import jinja2

    jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(GUI_TEMPLATE)), keep_trailing_newline=True)
    dockerfile = jinja.get_template("Dockerfile.jinja").render()
    (dest / "Dockerfile").write_text(dockerfile + f"COPY site-packages/ {GUI_SITE_PACKAGES}\n")
    shutil.copy(GUI_TEMPLATE / "forge_webapp.py", dest / "forge_webapp.py")
    (dest / "webapp").mkdir()
    for name, text in webapp.items():
        (dest / "webapp" / name).write_text(text)
    for package in playwright_packages():
        shutil.copytree(package, dest / "site-packages" / package.name,
                        ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    return dest


@pytest.fixture(scope="session")
def gui_playwright_image(tmp_path_factory, build_cached):
    """build(tag, webapp) -> tag: ``gui_context`` built, rebuilt only when the template, the web app or
    playwright changed (Docker's layer cache keeps the Chromium layer shared between such images)."""

    def build(tag: str, webapp: dict[str, str]) -> str:
        return build_cached(gui_context(tmp_path_factory.mktemp("gui-context"), webapp), tag)

    return build
