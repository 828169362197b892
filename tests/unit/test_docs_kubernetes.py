"""docs/kubernetes.md shows only what works: every YAML document in it is a valid Kubernetes object (strict schema),
a valid run config, or kind's cluster config; every `forge` command line names a real command and real options;
and a block marked as a command's output is what that command prints today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from docs_check import blocks as guide_blocks
from docs_check import check_forge_commands, forge_commands

from openforgerl import cli as forge_cli
from openforgerl.rollout.orchestrator import RolloutConfig

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "kubernetes.md"
OUTPUT_MARK = re.compile(r"<!-- forge-output: (forge [^>]*?) -->\n```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
TOOL_CONFIGS = {"kind.x-k8s.io/v1alpha4": {"Cluster"}}
"""apiVersions of tools' own config files (not cluster objects), with the kinds the guide may show."""


def blocks(language: str) -> list[str]:
    return guide_blocks(GUIDE, language)


def documents() -> list[dict[str, Any]]:
    found = []
    for body in blocks("yaml"):
        for doc in yaml.safe_load_all(body):
            assert isinstance(doc, dict), f"a YAML document of the guide is not a mapping: {doc!r}"
            found.append(doc)
    return found


def objects() -> list[dict[str, Any]]:
    return [d for d in documents() if "apiVersion" in d and "kind" in d and d["apiVersion"] not in TOOL_CONFIGS]


def run_configs() -> list[dict[str, Any]]:
    return [d for d in documents() if "runtime" in d]


def test_the_guide_has_what_it_promises():
    kinds = {d["kind"] for d in objects()}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Pod", "NetworkPolicy"} <= kinds
    assert any(cfg.get("concurrency") == 200 for cfg in run_configs())
    assert forge_commands(GUIDE), "no forge command lines found"


def test_every_kubernetes_object_passes_the_strict_schema():
    pytest.importorskip("kubernetes_validate", reason="needs the dev extra (kubernetes-validate)")
    from openforgerl.testing.k8s_schema import schema_errors

    for obj in objects():
        name = f"{obj['kind']} {obj.get('metadata', {}).get('name', '?')}"
        assert schema_errors(obj) == [], name


def test_tool_configs_are_only_the_known_ones():
    for doc in documents():
        if doc.get("apiVersion") in TOOL_CONFIGS:
            assert doc.get("kind") in TOOL_CONFIGS[doc["apiVersion"]], doc


def test_every_yaml_document_is_an_object_or_a_run_config():
    for doc in documents():
        assert ("apiVersion" in doc and "kind" in doc) or "runtime" in doc, f"unchecked YAML in the guide: {doc}"


def test_every_run_config_validates_and_holds_no_secret(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FORGE_PROXY_ADMIN_TOKEN", raising=False)
    configs = run_configs()
    assert configs
    for raw in configs:
        assert "admin_token" not in (raw.get("proxy") or {}), "the admin token belongs in $FORGE_PROXY_ADMIN_TOKEN"
        config = RolloutConfig.model_validate(raw)
        assert config.runtime.type == "kubernetes"
        if config.proxy.url:  # what the run itself requires of a deployed proxy (run._check_reach)
            assert config.proxy.sandbox_url, raw


def test_every_forge_command_names_real_commands_and_options():
    assert check_forge_commands(GUIDE) > 0


def test_shown_output_is_what_the_command_prints(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(REPO)
    shown = OUTPUT_MARK.findall(GUIDE.read_text(encoding="utf-8"))
    assert shown, "no block marked <!-- forge-output: ... -->"
    forge_cli._register()
    for command, body in shown:
        result = CliRunner().invoke(forge_cli.cli, shlex.split(command)[1:])
        assert result.exit_code == 0, f"{command}: {result.output}"
        assert list(yaml.safe_load_all(result.output)) == list(yaml.safe_load_all(body)), \
            f"docs/kubernetes.md shows an old output of {command}: rerun it and paste what it prints"
