"""Mistral's tool calls (``proxy.tool_parser = "mistral"``): everything after a ``[TOOL_CALLS]`` marker, a special token
of Mistral's tokenizers, as a JSON list of calls (or, from tokenizer version 11, ``NAME[ARGS]{...}`` after each
marker). The marker is kept in the text the parser reads, and each call's id ends in the id the model wrote, which
Mistral's templates write back: the history renders as sampled."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import LOOP_CALLS, MISTRAL_TEMPLATE, calls_of, harness_loop, under

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.tool_parser import CALL_ID_PREFIX, make_tool_parser, tool_parser_for
from openforgerl.rollout.proxy.tool_parsers.mistral import ARGS, CALL_ID, MARKERS, TOOL_CALLS
from openforgerl.testing.proxy import streamed_and_whole

MISTRAL = make_tool_parser("mistral")
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}]


def calls(text: str) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in MISTRAL.parse(text, TOOLS)[1]]


def test_both_forms_are_calls_and_the_text_before_the_marker_stays_text():
    listed = f'{TOOL_CALLS} [{{"name": "edit", "arguments": {{"path": "a.py", "line": 3}}, "id": "a1b2c3d4e"}}, ' \
             f'{{"name": "ls", "arguments": {{}}, "id": "zz99yy88x"}}]'
    assert calls(listed) == [("edit", {"path": "a.py", "line": 3}), ("ls", {})]
    content, made = MISTRAL.parse("Checking.\n" + listed)
    assert content == "Checking." and [c.id[-9:] for c in made] == ["a1b2c3d4e", "zz99yy88x"]
    assert all(c.id.startswith(CALL_ID_PREFIX) for c in made) and made[0].id != MISTRAL.parse(listed)[1][0].id
    named = f'{TOOL_CALLS}edit{ARGS}{{"line": 1}}{TOOL_CALLS}ls{CALL_ID}q1w2e3r4t{ARGS}{{}}'
    assert calls(named) == [("edit", {"line": 1}), ("ls", {})]
    assert MISTRAL.parse(named)[1][1].id.endswith("q1w2e3r4t")
    assert MISTRAL.parse(f'{TOOL_CALLS}ls{ARGS}{{}}')[1][0].id[len(CALL_ID_PREFIX):].isalnum()  # no id written


def test_what_is_not_all_calls_is_text_as_the_model_wrote_it():
    for text in [f"{TOOL_CALLS} [{{bad json", f'{TOOL_CALLS} [{{"name": "edit", "arguments": [1]}}]',
                 f'{TOOL_CALLS} [{{"name": "", "arguments": {{}}}}]', f'{TOOL_CALLS} [{{"arguments": {{}}}}]',
                 f'{TOOL_CALLS} []', f'{TOOL_CALLS}edit{{"line": 1}}', f'{TOOL_CALLS}edit{ARGS}{{"line": 1}} and more',
                 f'{TOOL_CALLS} [{{"name": "ls", "arguments": {{}}}}] then prose', "no calls [TOOL at all"]:
        assert MISTRAL.parse(text, TOOLS) == (text, []), text


def test_a_forced_call_starts_with_the_named_function():
    assert calls(MISTRAL.forced_prefix("edit") + '{"line": 2}}]') == [("edit", {"line": 2})]


@settings(max_examples=200, deadline=None)
@given(made=st.lists(st.tuples(st.from_regex(r"[a-z_][a-z0-9_.]{0,8}", fullmatch=True),
                               st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=6), max_size=3)),
                     max_size=3))
def test_format_is_what_the_parser_reads_back(made):
    text = MISTRAL.format([ToolCall("", name, json.dumps(args)) for name, args in made])
    assert calls(text) == [(name, args) for name, args in made]


pieces = st.lists(st.sampled_from([
    "Hi", " there", "\n", TOOL_CALLS, "[TOOL", "_CALLS]", ARGS, CALL_ID, " [", "]", "edit", '{"line": 1}', ", ",
    '{"name": "ls", "arguments": {}}', '"id": "a1b2c3d4e"', "{bad", "  ", "é"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    (text, made), (whole_text, whole_made) = streamed_and_whole(MISTRAL, whole, cuts, TOOLS)
    assert text == whole_text and [(n, a) for n, a in made] == [(n, a) for n, a in whole_made]


def test_under_mistral_s_template_the_harness_gets_the_calls_and_every_call_extends_cleanly(policy):
    template = under(policy, MISTRAL_TEMPLATE, MARKERS)  # the markers special tokens, as Mistral's tokenizers hold them
    assert type(tool_parser_for(template, "auto")) is type(MISTRAL)
    answers, trajectory = harness_loop(template, TOOLS)
    assert [calls_of(a) for a in answers] == LOOP_CALLS
    assert answers[-1]["content"] == "done" and "TOOL_CALLS" not in json.dumps(answers)
    # the ids the harness got end in those the model wrote, which the template writes back: no realignment
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1


def test_every_wire_hands_the_template_the_call_ids_the_harness_sent_back():
    """Mistral's templates write each call's id (its last 9 characters) and the id a tool's answer is for: the
    canonical conversation keeps them from each dialect (as the proxy gave them: chat ``call_...``, Anthropic
    ``toolu_...``, Responses' ``call_id``), all ending in the same characters."""
    from openforgerl.rollout.proxy.dialects.chat import parse_message
    from openforgerl.rollout.proxy.dialects.messages import parse_messages
    from openforgerl.rollout.proxy.dialects.responses import parse_input

    chat = [parse_message(m, i) for i, m in enumerate([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0123a1b2c3d4e", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_0123a1b2c3d4e", "content": "ok"}])]
    anthropic = parse_messages([
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "toolu_0123a1b2c3d4e", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0123a1b2c3d4e", "content": "ok"}]}])
    responses = parse_input([
        {"type": "function_call", "call_id": "call_0123a1b2c3d4e", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_0123a1b2c3d4e", "output": "ok"}])
    for messages in (chat, anthropic, responses):
        (call,), tool = messages[0]["tool_calls"], messages[1]
        assert call["id"][-9:] == tool["tool_call_id"][-9:] == "a1b2c3d4e"
    # a harness that sends no ids (they are optional on some wires) gets no key, as before
    assert "tool_call_id" not in parse_message({"role": "tool", "content": "ok"}, 0)
