"""Offline validation of Kubernetes manifests against the Kubernetes OpenAPI schema, in strict mode.

Invariant: a manifest for which `schema_errors` returns [] has every field known to the schema of Kubernetes
`K8S_VERSION` for its apiVersion/kind (strict: an unknown or misspelt field is an error), of the declared type,
with every required field present. Nothing is fetched: the schemas are the JSON Schema files that the
`kubernetes-validate` package ships (generated from the Kubernetes OpenAPI definitions, one directory per minor
version, local `$ref`s only), read once per version and kind. What only an API server checks (enum values, name
syntax, requests <= limits, admission) is beyond it.

`kubernetes-validate` is in the dev extra, not a runtime dependency: this module imports without it and raises
ImportError only when called.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Iterable
from importlib.resources.abc import Traversable
from typing import Any

K8S_VERSION = "1.35"
"""The Kubernetes minor version validated against: the oldest one still supported upstream (1.35-1.37 at
kubernetes-validate 1.37.0); GA APIs only ever gain fields, so what it accepts every supported cluster accepts."""

_PACKAGE = "kubernetes-validate==1.37.0"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def schema_errors(manifest: dict[str, Any], version: str = K8S_VERSION) -> list[str]:
    """Violations of the strict schema of Kubernetes `version` ("1.35") by `manifest`; [] when valid.

    One line each, sorted, naming the JSON path: "spec.containers[0].securityContext.runAsUser: 'x' is not of
    type 'integer'", "spec.restartPolicyy: unknown field in Kubernetes 1.35", "spec.containers[0].name: required
    field missing". A kind or apiVersion the schema does not have is an error too; a `version` whose schemas the
    package does not ship raises ValueError.
    """
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    missing = [f"{key}: required field missing" for key, value in (("apiVersion", api_version), ("kind", kind))
               if not isinstance(value, str)]
    if missing:
        return missing
    validator = _validator(version, _schema_name(str(api_version), str(kind)))
    if validator is None:
        return [f"kind: no Kubernetes {version} schema for {kind} in {api_version}"]
    return sorted({line for error in validator.iter_errors(manifest) for line in _lines(error, version)})


def _schema_name(api_version: str, kind: str) -> str:
    """The package's file name for a kind: "networking.k8s.io/v1" NetworkPolicy -> networkpolicy-networking-v1."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


def _schema_dir(version: str) -> Traversable:
    """The package's directory of strict schemas for a Kubernetes minor version."""
    try:
        root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    except ModuleNotFoundError as exc:
        raise ImportError(f"openforgerl.testing.k8s_schema needs the dev extra ({_PACKAGE}): "
                          "pip install -e '.[dev]'") from exc
    directory = root / f"v{version}.0-local-strict"
    if not directory.is_dir():
        shipped = [m[1] for entry in root.iterdir() if (m := re.fullmatch(r"v(\d+\.\d+)\.0-local-strict", entry.name))]
        raise ValueError(f"no schemas for Kubernetes {version!r} in {_PACKAGE}; it has {', '.join(sorted(shipped))}")
    return directory


@functools.cache
def _validator(version: str, name: str) -> Any:
    """The cached validator of one kind's schema, resolving its `$ref`s in the version's definitions; None when the
    package has no such schema."""
    schema_file = _schema_dir(version) / name
    if not schema_file.is_file():
        return None
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    return Draft202012Validator(json.loads(schema_file.read_text()), registry=_registry(version))


@functools.cache
def _registry(version: str) -> Any:
    """The version's shared definitions (1.4 MB of JSON) as a registry that never retrieves anything remotely."""
    from referencing import Registry, Resource

    definitions = json.loads((_schema_dir(version) / "_definitions.json").read_text())
    return Resource.from_contents(definitions) @ Registry()


def _lines(error: Any, version: str) -> Iterable[str]:
    """One jsonschema error as lines; unknown and missing fields are named by their own path."""
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = error.schema.get("properties", {})
        return [f"{_path([*error.absolute_path, key])}: unknown field in Kubernetes {version}"
                for key in error.instance if key not in known]
    if error.validator == "required":
        return [f"{_path([*error.absolute_path, key])}: required field missing"
                for key in error.validator_value if key not in error.instance]
    message = error.message
    if error.validator == "type":  # the generated schemas make every type nullable: name the real one alone
        types = [error.validator_value] if isinstance(error.validator_value, str) else error.validator_value
        message = f"{error.instance!r} is not of type {' or '.join(repr(t) for t in types if t != 'null')}"
    return [f"{_path(error.absolute_path) or '(root)'}: {message}"]


def _path(parts: Iterable[str | int]) -> str:
    """A JSON path as spec.containers[0].name; keys that are not identifiers are quoted: labels['a.b/c']."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out
