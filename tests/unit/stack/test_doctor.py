"""forge doctor: one row per part, read-only, exit 1 only when a required part is not ready."""

from __future__ import annotations

import sys
import types

import pytest
from click.testing import CliRunner

from openforgerl.cli import cli
from openforgerl.cli import stack as stack_cli  # noqa: F401  (registers the commands)
from openforgerl.plugins import NameTable
from openforgerl.stack import parts as stack_parts
from openforgerl.stack.part import Part, PartStatus


class ReadyPart(Part):
    name = "ready-part"

    def check(self) -> PartStatus:
        return self.status(True, "all good")

    def ensure(self, report):
        raise AssertionError("doctor must not call ensure")


class BrokenPart(ReadyPart):
    name = "broken-part"

    def check(self) -> PartStatus:
        return self.status(False, "it is down", fix="start it")


class OptionalBrokenPart(BrokenPart):
    name = "optional-part"
    optional = True


class CrashingPart(ReadyPart):
    name = "crashing-part"

    def check(self) -> PartStatus:
        raise RuntimeError("boom")


@pytest.fixture
def parts_table(monkeypatch):
    module = types.ModuleType("fake_forge_parts")
    for cls in (ReadyPart, BrokenPart, OptionalBrokenPart, CrashingPart):
        setattr(module, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, "fake_forge_parts", module)
    monkeypatch.setenv("COLUMNS", "250")

    def use(**paths: str) -> None:
        monkeypatch.setattr(stack_parts, "PARTS", NameTable("stack part", paths))

    return use


def doctor():
    return CliRunner().invoke(cli, ["doctor"])


def test_all_ready_exits_0(parts_table):
    parts_table(a="fake_forge_parts:ReadyPart")
    result = doctor()
    assert result.exit_code == 0, result.output
    assert "ready-part" in result.output and "all good" in result.output


def test_optional_part_not_ready_does_not_fail(parts_table):
    parts_table(a="fake_forge_parts:ReadyPart", b="fake_forge_parts:OptionalBrokenPart")
    result = doctor()
    assert result.exit_code == 0, result.output
    assert "optional, not ready" in result.output


def test_required_part_not_ready_fails_and_shows_the_fix(parts_table):
    parts_table(a="fake_forge_parts:BrokenPart", b="fake_forge_parts:ReadyPart")
    result = doctor()
    assert result.exit_code == 1
    assert "it is down" in result.output and "start it" in result.output
    assert "all good" in result.output  # the rows after a failing one still show


def test_a_part_whose_module_is_missing_is_a_not_ready_row(parts_table):
    parts_table(a="fake_forge_parts:ReadyPart", model="openforgerl.no_such_module:ModelPart")
    result = doctor()
    assert result.exit_code == 1
    assert "model" in result.output and "No module named 'openforgerl.no_such_module'" in result.output
    assert "all good" in result.output


def test_a_crashing_check_is_reported_on_its_row(parts_table):
    parts_table(a="fake_forge_parts:CrashingPart", b="fake_forge_parts:ReadyPart")
    result = doctor()
    assert result.exit_code == 1
    assert "RuntimeError: boom" in result.output and "all good" in result.output
