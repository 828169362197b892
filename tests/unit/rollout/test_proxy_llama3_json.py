"""Llama 3.x's JSON tool calls (``proxy.tool_parser = "llama3_json"``): an answer made of call objects is calls, as
vLLM's ``llama3_json`` parser reads it; any other answer is text, streamed as the model writes it."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import LLAMA_TEMPLATE, under

from openforgerl.rollout.proxy.conversation import TextDelta, ToolCall, ToolCallDone
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.proxy import InProcessProxy, streamed_and_whole, tool_loop

LLAMA = make_tool_parser("llama3_json")
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}]


def calls(text: str) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in LLAMA.parse(text, TOOLS)[1]]


def test_an_answer_of_call_objects_is_calls_with_or_without_the_python_tag():
    assert LLAMA.parse('{"name": "edit", "parameters": {"path": "a.py", "line": 3}}', TOOLS)[0] == ""
    assert calls('{"name": "edit", "parameters": {"path": "a.py", "line": 3}}') == [
        ("edit", {"path": "a.py", "line": 3})]
    assert calls('<|python_tag|>{"name": "edit", "arguments": {"line": 1}}; {"name": "ls", "parameters": {}}\n') == [
        ("edit", {"line": 1}), ("ls", {})]
    assert calls('\n {"name": "status"}') == [("status", {})]


def test_any_other_answer_is_text_as_the_model_wrote_it():
    for text in ["I will edit a.py now.",
                 'Here: {"name": "edit", "parameters": {}}',  # a call after prose is not one
                 '{"name": "edit", "parameters": {}} and then I stop.',  # nor one followed by prose
                 '{"name": "edit", "parameters": {}};',  # a separator with nothing after it
                 '{"name": "edit", "parameters": "line=3"}',  # arguments that are not an object
                 '{"path": "a.py"}', '{"name": "", "parameters": {}}', "{not json", "<|python_tag|>print(1)",
                 '[{"name": "edit", "parameters": {}}]', "  \n"]:
        assert LLAMA.parse(text, TOOLS) == (text, []), text


def test_text_streams_as_it_comes_and_an_answer_that_may_be_a_call_waits_for_its_end():
    stream = LLAMA.stream(TOOLS)
    assert stream.feed("\n") == [] and stream.feed("Sure") == [TextDelta("\nSure")]
    assert stream.feed(", done.") == [TextDelta(", done.")] and stream.finish() == []
    stream = LLAMA.stream(TOOLS)
    assert stream.feed("<|py") == [] and stream.feed('thon_tag|>{"name": "ls", ') == []
    assert stream.feed('"parameters": {}}') == []
    (done,) = stream.finish()
    assert isinstance(done, ToolCallDone) and (done.call.name, done.call.arguments) == ("ls", "{}")


def test_a_forced_call_starts_with_the_named_function():
    prefix = LLAMA.forced_prefix("edit")
    assert prefix == '{"name": "edit", "parameters": '
    assert calls(prefix + '{"line": 2}}') == [("edit", {"line": 2})]


arguments = st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=6), max_size=4)


@settings(max_examples=200, deadline=None)
@given(made=st.lists(st.tuples(st.text(min_size=1, max_size=8), arguments), min_size=1, max_size=3))
def test_format_is_what_the_parser_reads_back(made):
    text = LLAMA.format([ToolCall(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(made)])
    assert calls(text) == [(name, args) for name, args in made]


pieces = st.lists(st.sampled_from(["Hi", " there", "\n", "{", "}", '"name": "ls"', ", ", '"parameters": {}',
                                   '"parameters": {"x": 1}', "; ", "<|python_tag|>", "<|py", "thon_tag|>", "  ",
                                   "é", "{bad"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    streamed, at_once = streamed_and_whole(LLAMA, whole, cuts, TOOLS)
    assert streamed == at_once
    assert streamed[0] == whole or streamed[1]  # text is never changed, only read as calls


def test_under_a_llama_style_template_calls_extend_cleanly_and_prompts_render_as_the_template(policy):
    """The policy's tokenizer under a template that writes calls in this syntax: the harness gets the calls; sent
    back, they render as sampled, so every call extends its segment with no realignment."""
    template = under(policy, LLAMA_TEMPLATE)
    turns = [ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "a.py", "line": 3}}]),
             ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "b.py", "lines": [1, 2]}}]),
             ScriptTurn(text="done")]
    proxy = InProcessProxy(turns, tool_parser="llama3_json", template=template)

    messages, trajectory = tool_loop(proxy, TOOLS, len(turns))
    assert [json.loads(c["function"]["arguments"]) for c in messages[2]["tool_calls"]] == [{"path": "a.py", "line": 3}]
    assert messages[-1]["content"] == "done" and not messages[-1].get("tool_calls")
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
    history = copy.deepcopy(messages[:6])  # as the template takes it: arguments as objects
    for message in history:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    assert template.decode(proxy.engine.prompts[-1], False) == template.full_render(history, TOOLS, True)
