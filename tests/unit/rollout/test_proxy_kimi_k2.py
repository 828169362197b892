"""Kimi K2's tool calls (``proxy.tool_parser = "kimi_k2"``): a section of calls between special tokens, each call's id
(``functions.NAME:N``) naming its function. The id the model wrote is the id the harness gets (as vLLM's ``kimi_k2``
parser gives it), which Kimi's template writes back with the call and with the tool's answer: the history renders as
sampled."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import KIMI_TEMPLATE, LOOP_CALLS, calls_of, harness_loop, under

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.tool_parser import make_tool_parser, tool_parser_for
from openforgerl.rollout.proxy.tool_parsers.kimi_k2 import (
    ARGUMENT_BEGIN,
    CALL_BEGIN,
    CALL_END,
    MARKERS,
    SECTION_BEGIN,
    SECTION_END,
)
from openforgerl.testing.proxy import streamed_and_whole

KIMI = make_tool_parser("kimi_k2")
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}]


def section(*made: tuple[str, str]) -> str:
    return SECTION_BEGIN + "".join(f"{CALL_BEGIN}{i}{ARGUMENT_BEGIN}{a}{CALL_END}" for i, a in made) + SECTION_END


def test_a_section_is_calls_named_by_their_ids_which_the_harness_gets_as_written():
    content, made = KIMI.parse("On it.\n" + section(("functions.edit:0", '{"path": "a.py"}'),
                                                   ("functions.ls:1", "{}")), TOOLS)
    assert content == "On it."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in made] == [
        ("functions.edit:0", "edit", {"path": "a.py"}), ("functions.ls:1", "ls", {})]
    cut = section(("functions.ls:2", "{}"))[:-len(SECTION_END)]  # a length stop before the section's end
    assert [c.name for c in KIMI.parse(cut)[1]] == ["ls"]


def test_what_is_not_a_well_formed_section_is_text_as_the_model_wrote_it():
    for text in [section(("edit:0", "{}")), section(("functions.edit", "{}")), section(("functions.:0", "{}")),
                 section(("functions.edit:0", "{bad")), section(("functions.edit:0", "[1]")),
                 section(("functions.a b:0", "{}")),
                 section(("functions.ls:0", "{}"), ("functions.ls:0", "{}")),  # one id twice
                 SECTION_BEGIN + "prose" + SECTION_END, SECTION_BEGIN + SECTION_END]:
        assert KIMI.parse(text, TOOLS) == (text, []), text


def test_a_forced_call_starts_with_the_named_function():
    (call,) = KIMI.parse(KIMI.forced_prefix("edit") + '{"line": 2}' + CALL_END + SECTION_END)[1]
    assert (call.name, json.loads(call.arguments)) == ("edit", {"line": 2})


@settings(max_examples=200, deadline=None)
@given(made=st.lists(st.tuples(st.from_regex(r"[a-z_][a-z0-9_.]{0,8}", fullmatch=True),
                               st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=6), max_size=3)),
                     max_size=3))
def test_format_is_what_the_parser_reads_back(made):
    text = KIMI.format([ToolCall("", name, json.dumps(args)) for name, args in made])
    assert [(c.name, json.loads(c.arguments)) for c in KIMI.parse(text)[1]] == [(n, a) for n, a in made]


pieces = st.lists(st.sampled_from([
    "Hi", " there", "\n", SECTION_BEGIN, SECTION_END, CALL_BEGIN, CALL_END, ARGUMENT_BEGIN, "functions.edit:0",
    "functions.ls:1", '{"line": 1}', "{bad", "<|tool_calls", "_section_begin|>", "  ", "é"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    streamed, at_once = streamed_and_whole(KIMI, whole, cuts, TOOLS)
    assert streamed == at_once


def test_under_kimi_s_template_the_harness_gets_the_model_s_ids_and_every_call_extends_cleanly(policy):
    template = under(policy, KIMI_TEMPLATE, MARKERS)  # the markers special tokens, as Kimi's tokenizer holds them
    assert type(tool_parser_for(template, "auto")) is type(KIMI)
    answers, trajectory = harness_loop(template, TOOLS)
    assert [calls_of(a) for a in answers] == LOOP_CALLS
    assert [[c["id"] for c in a.get("tool_calls") or []] for a in answers] == [
        ["functions.edit:0"], ["functions.edit:0", "functions.ls:1"], []]  # as the model wrote them
    assert answers[-1]["content"] == "done" and "<|tool" not in json.dumps(answers)
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
