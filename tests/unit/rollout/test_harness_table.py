"""One definition per harness: the table names it, its class declares the rest, everything else derives.

The install catalog, launchers, the image layer's tool, and the CLI's harness lists come from the
harness table and the classes it names, plugins included; a pin is written exactly once.
"""

from __future__ import annotations

import inspect
import sys
from importlib.metadata import EntryPoint, EntryPoints
from pathlib import Path

import pytest
from click.testing import CliRunner

import openforgerl.plugins
from openforgerl.errors import ConfigError, UserError
from openforgerl.rollout.harness import TOOLS_MOUNT
from openforgerl.rollout.harnesses import HARNESSES, harness_class, make_harness, validate_harness_options
from openforgerl.rollout.harnesses.install import catalog, get_package, launcher_path

REPO = Path(__file__).parents[3]
INSTALLABLE = ["react", "browser", "codex", "opencode", "claude-code", "openclaw", "mini-swe-agent"]

PLUGIN = '''
from pydantic import Field

from openforgerl.rollout.harness import Harness, HarnessOptions, HarnessPackage, Invocation


class HermesHarness(Harness):
    class Options(HarnessOptions):
        level: int = Field(1, ge=1)
        """How hard it tries."""

    name = "hermes"
    package = HarnessPackage("npm", "hermes-agent@1.2.3", "hermes")

    def invocation(self, ctx):
        return Invocation([self.launcher(), "--level", str(self.options.level), ctx.instruction])


class Misnamed(HermesHarness):
    name = "not-hermes"
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A third-party package registering ``hermes`` under the harness entry-point group."""
    (tmp_path / "forge_hermes.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "forge_hermes", raising=False)
    points = EntryPoints([EntryPoint("hermes", "forge_hermes:HermesHarness", "openforgerl.harnesses")])
    real = openforgerl.plugins.entry_points
    monkeypatch.setattr(openforgerl.plugins, "entry_points",
                        lambda **kw: points if kw.get("group") == "openforgerl.harnesses" else real(**kw))


def test_the_catalog_is_the_packages_the_harness_classes_declare():
    assert list(catalog()) == INSTALLABLE
    assert catalog() == {name: harness_class(name).package for name in INSTALLABLE}
    assert {harness_class(name).package for name in ("nop", "oracle")} == {None}


@pytest.mark.parametrize("name", INSTALLABLE)
def test_each_pin_is_written_once_in_its_harness_module(name: str):
    pin = catalog()[name].package
    sources = [path for root in ("openforgerl", "tests", "bench", "scripts") for path in (REPO / root).rglob("*.py")]
    holders = [path for path in sources if pin in path.read_text(errors="replace")]
    assert holders == [Path(inspect.getsourcefile(harness_class(name)))]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", INSTALLABLE)
def test_launcher_and_tool_derive_from_the_package(name: str, tmp_path: Path):
    harness = make_harness(name)
    assert harness.tool == name
    assert harness.launcher() == f"{TOOLS_MOUNT}/bin/{get_package(name).bin}"
    assert launcher_path(name, tmp_path) == tmp_path / "bin" / get_package(name).bin


@pytest.mark.parametrize("name", ["nop", "oracle"])
def test_a_harness_without_a_package_has_no_tool_and_no_launcher(name: str):
    harness = make_harness(name)
    assert harness.tool is None
    with pytest.raises(UserError, match="has no package"):
        harness.launcher()


def test_an_entry_point_harness_is_found_by_name_with_its_package_and_options(plugin):
    assert HARNESSES.names()[-1] == "hermes" and "hermes" in HARNESSES
    harness = make_harness("hermes", level=3)
    assert type(harness) is harness_class("hermes") and harness.tool == "hermes"
    assert harness.launcher() == f"{TOOLS_MOUNT}/bin/hermes"
    assert catalog()["hermes"].package == "hermes-agent@1.2.3" and get_package("hermes").bin == "hermes"
    with pytest.raises(ConfigError) as exc:
        validate_harness_options("hermes", {"levle": 3})
    assert str(exc.value) == "harness_options.levle: not an option of harness hermes; fix: use one of: level"


def test_a_plugin_whose_class_names_itself_otherwise_is_refused_by_the_catalog(plugin, monkeypatch):
    points = EntryPoints([EntryPoint("hermes", "forge_hermes:Misnamed", "openforgerl.harnesses")])
    monkeypatch.setattr(openforgerl.plugins, "entry_points", lambda **kw: points)
    with pytest.raises(UserError, match="harness 'hermes' .* calls itself 'not-hermes'"):
        catalog()


def test_the_cli_lists_come_from_the_table(plugin):
    from openforgerl.cli import _register, cli

    _register()
    runner = CliRunner()
    help_text = runner.invoke(cli, ["rollout", "--help"], terminal_width=400, max_content_width=400).output
    assert f"Harness to run: {', '.join(HARNESSES.names())}." in help_text and HARNESSES.names()[-1] == "hermes"
    listing = dict(line.split(maxsplit=1) for line in runner.invoke(cli, ["harness", "list"]).output.splitlines())
    assert list(listing) == HARNESSES.names()
    assert listing["hermes"].split() == ["hermes-agent@1.2.3", "not", "installed"]
    assert listing["nop"].split() == ["-", "nothing", "to", "install"]
