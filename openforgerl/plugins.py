"""Name tables: how a short name (``docker``, ``codex``, ``hermes``) becomes the class behind it.

Built-ins are a ``name -> "module:attribute"`` table, imported only when that name is used, so a
missing optional extra only affects its own entry. Third parties add names through an entry-point
group (``openforgerl.harnesses``, ``openforgerl.runtimes``); a built-in name always wins.
Invariant: an unknown name is an ``UnknownNameError`` listing every known name, built-in or plugin.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar, cast

from openforgerl.errors import UnknownNameError

T = TypeVar("T")


def load_path(path: str) -> Any:
    """The object a ``"package.module:attribute"`` path names."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


class NameTable(Generic[T]):
    """The ``kind``s known by name: ``builtins`` plus the entry points of ``group``."""

    def __init__(self, kind: str, builtins: Mapping[str, str], group: str | None = None) -> None:
        self.kind, self.builtins, self.group = kind, dict(builtins), group

    def _plugins(self) -> dict[str, EntryPoint]:
        if self.group is None:
            return {}
        return {ep.name: ep for ep in entry_points(group=self.group) if ep.name not in self.builtins}

    def names(self) -> list[str]:
        """Built-ins in their table order, then plugins."""
        return [*self.builtins, *self._plugins()]

    def path(self, name: str) -> str:
        """Where ``name`` is defined (for messages)."""
        if name in self.builtins:
            return self.builtins[name]
        plugin = self._plugins().get(name)
        if plugin is None:
            raise UnknownNameError(self.kind, name, self.names())
        return plugin.value

    def load(self, name: str) -> T:
        """Import and return what ``name`` stands for."""
        if name in self.builtins:
            return cast(T, load_path(self.builtins[name]))
        plugin = self._plugins().get(name)
        if plugin is None:
            raise UnknownNameError(self.kind, name, self.names())
        return cast(T, plugin.load())

    def __contains__(self, name: object) -> bool:
        return name in self.builtins or name in self._plugins()
