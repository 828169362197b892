"""Runtime implementations, by name, and the factory that builds one from its settings.

Built-ins: ``docker``, ``local`` and ``kubernetes``; third parties register more under the entry-point group
``openforgerl.runtimes``. Invariant: ``runtime:`` in a run config is validated against the settings
model of the runtime its ``type`` names (``Runtime.Config``), so a plugin runtime is configured
exactly like a built-in one and a misspelt setting is an error, not silently dropped.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from openforgerl.errors import ConfigError
from openforgerl.plugins import NameTable
from openforgerl.rollout.runtime import Runtime, RuntimeConfig

RUNTIMES: NameTable[type[Runtime]] = NameTable("runtime", {
    "docker": "openforgerl.rollout.runtimes.docker:DockerRuntime",
    "local": "openforgerl.rollout.runtimes.local:LocalRuntime",
    "kubernetes": "openforgerl.rollout.runtimes.kubernetes:KubernetesRuntime",
}, "openforgerl.runtimes")

DEFAULT_RUNTIME = "docker"


def runtime_class(name: str) -> type[Runtime]:
    return RUNTIMES.load(name)


def runtime_config(value: Any) -> RuntimeConfig:
    """Settings for the runtime ``value["type"]`` names (docker when unset), validated by its ``Config``."""
    if isinstance(value, RuntimeConfig):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump()
    data = dict(value or {})
    data.setdefault("type", DEFAULT_RUNTIME)
    model = runtime_class(str(data["type"])).Config
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"runtime.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        valid = ", ".join(model.model_fields)
        raise ConfigError(problems, fix=f"the {data['type']} runtime takes: {valid}") from None


def make_runtime(config: RuntimeConfig | dict[str, Any] | None = None) -> Runtime:
    settings = runtime_config(config)
    return runtime_class(settings.type)(config=settings)
