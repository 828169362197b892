"""The built-in task families, per domain (each domain package lists its own in ``TABLE``), plus
third-party families from the ``openforgerl.synth_families`` entry point group."""

from __future__ import annotations

from openforgerl.plugins import NameTable
from openforgerl.synth.families import claw, code, gui
from openforgerl.synth.family import Family

FAMILIES: NameTable[type[Family]] = NameTable("synth family", {**gui.TABLE, **claw.TABLE, **code.TABLE},
                                              "openforgerl.synth_families")


def family(name: str) -> Family:
    return FAMILIES.load(name)()
