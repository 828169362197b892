"""Layered configuration: defaults < file (YAML or TOML) < dotted ``a.b=c`` overrides.

The key invariant: what a run used is exactly what ``resolve`` returned, and that resolved
config is saved next to the run's outputs (``save_resolved``) so a run can be reproduced.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from openforgerl.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Load a YAML (.yaml/.yml) or TOML (.toml) mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist", fix="pass an existing .yaml or .toml file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml", ".json"):
            data = yaml.safe_load(text)
        else:
            raise ConfigError(f"{path}: unknown config format {path.suffix!r}", fix="use .yaml, .yml or .toml")
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}".replace("\n", " "),
                          fix="correct the syntax at the position shown") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}",
                          fix="write key: value pairs at the top level")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], c); the value is parsed as YAML (so 3, true, [1,2] work)."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r} is not of the form key.path=value",
                          fix="write e.g. agent.timeout_sec=600")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each dotted override set (creating tables as needed)."""
    result = json.loads(json.dumps(data, default=str))
    for text in overrides:
        keys, value = parse_override(text)
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(f"override {text!r}: {where} is a value, not a table",
                                  fix=f"override {where} itself, or drop the extra key")
            node = child
        node[keys[-1]] = value
    return result


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``top`` over ``base`` (tables merge, everything else replaces)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve(model: type[ModelT], path: str | Path | None = None, overrides: list[str] | None = None,
            defaults: dict[str, Any] | None = None) -> ModelT:
    """Build a validated ``model`` from defaults, an optional file and dotted overrides."""
    data = merge(defaults or {}, read_config_file(path) if path else {})
    data = apply_overrides(data, overrides or [])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        source = str(path) if path else "config"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{source}: {problems}", fix="correct or remove the fields named") from exc


def save_resolved(config: BaseModel, run_dir: str | Path, name: str = "config.yaml") -> Path:
    """Write the resolved config into ``run_dir`` (created if needed) and return its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / name
    target.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return target
