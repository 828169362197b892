"""docs/kubernetes.md shows only what works: every YAML document in it is a valid Kubernetes object (strict schema),
a valid run config, or kind's cluster config; every `forge` command line names a real command and real options;
and a block marked as a command's output is what that command prints today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from openforgerl import cli as forge_cli
from openforgerl.rollout.orchestrator import RolloutConfig

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "kubernetes.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
OUTPUT_MARK = re.compile(r"<!-- forge-output: (forge [^>]*?) -->\n```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
TOOL_CONFIGS = {"kind.x-k8s.io/v1alpha4": {"Cluster"}}
"""apiVersions of tools' own config files (not cluster objects), with the kinds the guide may show."""
OPERATORS = {"|", "||", "&", "&&", ";", "(", ")"}


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(GUIDE.read_text(encoding="utf-8")) if lang == language]


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


def forge_commands() -> list[list[str]]:
    """Every `forge ...` command of the bash blocks, as argv after `forge` (continuations joined, comments
    dropped, pipelines and lists split, leading VAR=value assignments skipped)."""
    commands = []
    for body in blocks("bash"):
        for line in body.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            segment: list[str] = []
            for token in [*lexer, ";"]:
                if token not in OPERATORS:
                    segment.append(token)
                    continue
                while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
                    segment.pop(0)
                if segment and segment[0] == "forge":
                    commands.append(segment[1:])
                segment = []
    return commands


def resolve(argv: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """(subcommand path, the command it names, the tokens left for it); asserts each path step exists."""
    forge_cli._register()
    command: click.Command = forge_cli.cli
    path, rest = [], list(argv)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"forge {' '.join(path + [name])}: no such command"
        command, path = sub, path + [name]
    return path, command, rest


def test_the_guide_has_what_it_promises():
    kinds = {d["kind"] for d in objects()}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Pod", "NetworkPolicy"} <= kinds
    assert any(cfg.get("concurrency") == 200 for cfg in run_configs())
    assert forge_commands(), "no forge command lines found"


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
    runner = CliRunner()
    checked: set[tuple[str, ...]] = set()
    for argv in forge_commands():
        path, command, rest = resolve(argv)
        assert not isinstance(command, click.Group), f"forge {' '.join(argv)}: names a group, not a command"
        options = {opt for param in command.get_params(click.Context(command)) for opt in
                   (*param.opts, *param.secondary_opts) if opt.startswith("-")}
        for token in rest:
            if token.startswith("-") and token != "-":
                name = token.split("=", 1)[0]
                assert name in options, f"forge {' '.join(argv)}: {name} is not an option of forge {' '.join(path)}"
        if tuple(path) not in checked:
            checked.add(tuple(path))
            result = runner.invoke(forge_cli.cli, [*path, "--help"])
            assert result.exit_code == 0, f"forge {' '.join(path)} --help: {result.output}"


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
