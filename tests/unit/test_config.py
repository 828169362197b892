from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from openforgerl.config import apply_overrides, resolve, save_resolved
from openforgerl.errors import ConfigError


class Agent(BaseModel):
    timeout_sec: float = 600
    name: str = "react"


class RunConfig(BaseModel):
    concurrency: int = 4
    agent: Agent = Agent()
    tags: list[str] = []


def test_file_overrides_defaults_and_dotted_overrides_win(tmp_path: Path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("concurrency: 8\nagent:\n  name: codex\n")
    config = resolve(RunConfig, cfg, ["agent.timeout_sec=30", "tags=[a, b]"], defaults={"concurrency": 2})
    assert config.concurrency == 8          # file beats defaults
    assert config.agent.name == "codex"     # file
    assert config.agent.timeout_sec == 30   # override, parsed as a number
    assert config.tags == ["a", "b"]


def test_toml_files_load_the_same_way(tmp_path: Path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("concurrency = 3\n[agent]\nname = 'claude-code'\n")
    assert resolve(RunConfig, cfg).agent.name == "claude-code"


def test_override_creates_nested_tables_without_touching_input():
    data = {"a": {"b": 1}}
    out = apply_overrides(data, ["a.c.d=true"])
    assert out == {"a": {"b": 1, "c": {"d": True}}}
    assert data == {"a": {"b": 1}}


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1"])
def test_malformed_override_says_the_expected_form(bad: str):
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, [bad])


def test_override_into_a_scalar_names_the_key():
    with pytest.raises(ConfigError, match="concurrency is a value"):
        apply_overrides({"concurrency": 4}, ["concurrency.x=1"])


def test_invalid_value_names_the_field_and_file(tmp_path: Path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("agent:\n  timeout_sec: soon\n")
    with pytest.raises(ConfigError) as info:
        resolve(RunConfig, cfg)
    assert "run.yaml" in str(info.value) and "agent.timeout_sec" in str(info.value)


def test_syntax_error_and_missing_file_are_config_errors(tmp_path: Path):
    broken = tmp_path / "broken.toml"
    broken.write_text("concurrency = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve(RunConfig, broken)
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(RunConfig, tmp_path / "nope.yaml")


def test_resolved_config_is_saved_into_the_run_dir(tmp_path: Path):
    config = resolve(RunConfig, None, ["agent.name=opencode"])
    path = save_resolved(config, tmp_path / "run-1")
    assert yaml.safe_load(path.read_text())["agent"] == {"timeout_sec": 600.0, "name": "opencode"}
