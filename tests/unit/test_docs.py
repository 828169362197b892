"""Every guide in docs/ shows only what works: its YAML, TOML and JSON blocks parse, the run configs among
them validate, its Python blocks compile, and every `forge` command names a real command and real options.
(docs/kubernetes.md has its own, stricter test: Kubernetes objects against the cluster schema.)"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from docs_check import blocks, check_forge_commands

from openforgerl.rollout.orchestrator import RolloutConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDES = sorted(DOCS.glob("*.md"))
RUN_KEYS = set(RolloutConfig.model_fields)


def test_there_are_guides():
    assert {"training.md", "kubernetes.md"} <= {g.name for g in GUIDES}


@pytest.mark.parametrize("guide", GUIDES, ids=lambda g: g.name)
def test_every_config_block_parses_and_run_configs_validate(guide: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FORGE_PROXY_ADMIN_TOKEN", raising=False)
    for body in blocks(guide, "yaml"):
        for doc in yaml.safe_load_all(body):
            if isinstance(doc, dict) and doc and set(doc) <= RUN_KEYS and {"tasks", "harness"} & set(doc):
                assert "admin_token" not in (doc.get("proxy") or {}), "the admin token belongs in the environment"
                RolloutConfig.model_validate(doc)
    for body in blocks(guide, "toml"):
        tomllib.loads(body)
    for body in blocks(guide, "json"):
        json.loads(body)
    for body in blocks(guide, "python"):
        compile(body, f"{guide.name}:python", "exec")


@pytest.mark.parametrize("guide", GUIDES, ids=lambda g: g.name)
def test_every_forge_command_names_real_commands_and_options(guide: Path):
    check_forge_commands(guide)
