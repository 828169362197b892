"""forge harness install against the real npm registry and PyPI, checked with no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforgerl.errors import StackError
from openforgerl.rollout.harnesses import install as harness_install

pytestmark = pytest.mark.harness


@pytest.fixture(scope="module")
def tools_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tools")


@pytest.mark.parametrize("name", ["opencode", "react"])
def test_installed_harness_runs_with_no_network_and_reinstall_is_a_noop(tools_root: Path, name: str):
    actions = []
    record = harness_install.install(name, actions.append, root=tools_root)
    assert len(actions) == 1 and "undo: " not in actions[0].did and actions[0].undo.startswith("rm -rf")
    launcher = Path(record.launcher)
    assert launcher == harness_install.launcher_path(name, tools_root)
    # Runs inside an empty network namespace: nothing is fetched at run time.
    check = harness_install.get_package(name).check_args
    out = subprocess.run(["unshare", "-n", str(launcher), *check], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HOME": str(tools_root), "MSWEA_CONFIGURED": "true"})
    assert out.returncode == 0, out.stderr
    again = []
    assert harness_install.install(name, again.append, root=tools_root) == record
    assert again == []
    assert name in harness_install.installed(tools_root)


def test_a_failed_install_leaves_nothing_behind(tools_root: Path, monkeypatch):
    bogus = harness_install.HarnessPackage("npm", "openforgerl-no-such-package-zz@0.0.1", "bogus")
    packages = {**harness_install.catalog(), "bogus": bogus}
    monkeypatch.setattr(harness_install, "catalog", lambda: packages)
    with pytest.raises(StackError, match="npm install openforgerl-no-such-package-zz"):
        harness_install.install("bogus", lambda a: None, root=tools_root)
    assert not (tools_root / "bogus").exists()
    assert "bogus" not in harness_install.installed(tools_root)


def test_cli_lists_harnesses_and_rejects_unknown_names():
    listing = subprocess.run([sys.executable, "-m", "openforgerl", "harness", "list"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0 and "claude-code" in listing.stdout and "openclaw" in listing.stdout
    bad = subprocess.run([sys.executable, "-m", "openforgerl", "harness", "install", "gpt-agent"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    known = ", ".join(sorted(harness_install.catalog()))
    assert bad.stderr.strip().splitlines() == [f"UnknownNameError: unknown harness 'gpt-agent'; fix: use one of: {known}"]
