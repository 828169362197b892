"""Typed harness options: every adapter declares its settings, and a typo or a wrong type fails in one line."""

from __future__ import annotations

import pytest

from openforgerl.errors import ConfigError, UnknownNameError
from openforgerl.rollout.harnesses import HARNESSES, harness_class, make_harness, validate_harness_options

BUILTINS = list(HARNESSES.builtins)
FIELDS = [(name, key) for name in BUILTINS for key in harness_class(name).Options.model_fields]


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    text = f"{exc.type.__name__}: {exc.value}"
    assert "\n" not in text
    return text


@pytest.mark.parametrize("name", BUILTINS)
def test_every_harness_builds_with_its_default_options(name: str):
    harness = make_harness(name)
    assert harness.options == harness_class(name).Options()
    validate_harness_options(name, {})


@pytest.mark.parametrize(("name", "key"), FIELDS)
def test_every_option_is_documented(name: str, key: str):
    assert harness_class(name).Options.model_fields[key].description


@pytest.mark.parametrize("name", BUILTINS)
def test_an_unknown_option_is_refused_naming_it_and_the_valid_ones(name: str):
    valid = sorted(harness_class(name).Options.model_fields)
    with pytest.raises(ConfigError) as exc:
        make_harness(name, colour="blue")
    listed = f"use one of: {', '.join(valid)}" if valid else f"harness {name} takes no options"
    assert one_line(exc) == (f"ConfigError: harness_options.colour: not an option of harness {name}; "
                             f"fix: {listed}" + ("" if valid else "; remove harness_options"))


@pytest.mark.parametrize(("name", "key"), FIELDS)
def test_a_wrong_type_is_refused_naming_the_field_and_the_expected_type(name: str, key: str):
    with pytest.raises(ConfigError) as exc:
        validate_harness_options(name, {key: ["not", "a", "scalar"]})
    assert one_line(exc).startswith(f"ConfigError: harness_options.{key}: expected ")
    assert "got ['not', 'a', 'scalar']" in str(exc.value)


def test_a_typo_in_a_run_config_names_the_field_and_lists_the_valid_options():
    with pytest.raises(ConfigError) as exc:
        validate_harness_options("react", {"max_turn": 4})
    assert one_line(exc) == ("ConfigError: harness_options.max_turn: not an option of harness react; "
                             "fix: use one of: max_tokens, max_turns, temperature, tool_choice")


@pytest.mark.parametrize(("name", "options", "expected"), [
    ("react", {"max_turns": "many"}, "harness_options.max_turns: expected an integer, got 'many'"),
    ("codex", {"reasoning_effort": "extreme"},
     "harness_options.reasoning_effort: expected one of 'minimal', 'low', 'medium', 'high', got 'extreme'"),
    ("openclaw", {"api": "google-generative-ai"},
     "harness_options.api: expected one of 'openai-completions', 'openai-responses', 'anthropic-messages', "
     "got 'google-generative-ai'"),
    ("openclaw", {"lean": "perhaps"}, "harness_options.lean: expected true or false, got 'perhaps'"),
    ("mini-swe-agent", {"step_limit": -1}, "harness_options.step_limit: expected an integer, got -1 (input should "
                                           "be greater than or equal to 0)"),
    ("browser", {"viewport": "big"}, "harness_options.viewport: expected a string, got 'big' (string should match"),
    ("oracle", {"script": "../../etc/evil.sh"},
     "harness_options.script: expected a string, got '../../etc/evil.sh' (string should match"),
])
def test_the_message_says_what_was_expected_and_what_was_given(name: str, options: dict, expected: str):
    with pytest.raises(ConfigError) as exc:
        validate_harness_options(name, options)
    assert one_line(exc).startswith(f"ConfigError: {expected}")
    assert f"leave it out for harness {name}'s default" in str(exc.value)


def test_several_unknown_options_are_named_together():
    with pytest.raises(ConfigError, match=r"^harness_options.a, harness_options.b: not options of harness opencode;"):
        validate_harness_options("opencode", {"b": 1, "a": 2})


def test_defaults_are_todays():
    assert make_harness("opencode").options.agent == "build"
    mini = make_harness("mini-swe-agent").options
    assert (mini.command_timeout, mini.step_limit, mini.mode) == (60, 0, "toolcall")
    assert make_harness("openclaw").options.api == "openai-completions"
    assert make_harness("codex").options.reasoning_effort is None


def test_yaml_style_values_are_coerced_to_the_declared_type():
    assert make_harness("codex", context_window="8192").options.context_window == 8192


def test_an_unknown_harness_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="claude-code, codex"):
        validate_harness_options("cursor", {})
