"""Runtime implementations and the factory that builds one from its config.

Built-ins are a short-name -> dotted-path table; third parties register more under the entry-point
group ``openforgerl.runtimes``. An unknown name lists the known ones.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Annotated, Any

from pydantic import Field

from openforgerl.errors import UnknownNameError
from openforgerl.rollout.runtime import Runtime
from openforgerl.rollout.runtimes.docker import DockerRuntimeConfig
from openforgerl.rollout.runtimes.local import LocalRuntimeConfig

BUILTIN_RUNTIMES: dict[str, str] = {
    "docker": "openforgerl.rollout.runtimes.docker:DockerRuntime",
    "local": "openforgerl.rollout.runtimes.local:LocalRuntime",
}

RuntimeConfig = Annotated[DockerRuntimeConfig | LocalRuntimeConfig, Field(discriminator="type")]


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def runtime_class(name: str) -> type[Runtime]:
    if name in BUILTIN_RUNTIMES:
        return _load(BUILTIN_RUNTIMES[name])
    plugins = {ep.name: ep for ep in entry_points(group="openforgerl.runtimes")}
    if name in plugins:
        return plugins[name].load()
    raise UnknownNameError("runtime", name, [*BUILTIN_RUNTIMES, *plugins])


def make_runtime(config: DockerRuntimeConfig | LocalRuntimeConfig | Any) -> Runtime:
    return runtime_class(config.type)(config)
