"""GLM-4.5/4.6/4.7's tool calls (``proxy.tool_parser = "glm45"``): the function's name, then key and value pairs,
typed by the call's tool schemas as vLLM's ``glm45`` parser types them, so a policy is served as it will be later."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import GLM_TEMPLATE, TYPE_OF, VALUES, under

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.proxy import InProcessProxy, streamed_and_whole, tool_loop

GLM = make_tool_parser("glm45")
SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "ratio": {"type": "number"},
    "force": {"type": "boolean"}, "files": {"type": "array"}, "note": {"type": ["string", "null"]}}}
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": SCHEMA}}]


def call_text(name: str, *pairs: tuple[str, str], newline: bool = True) -> str:
    inner = "".join(f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n" for key, value in pairs)
    return f"<tool_call>{name}{chr(10) if newline else ''}{inner}</tool_call>"


def arguments(text: str, tools=TOOLS) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in GLM.parse(text, tools)[1]]


def test_values_take_the_types_their_schema_declares_and_strings_stay_text():
    text = "I will edit it.\n" + call_text("edit", ("path", "12"), ("line", "12"), ("ratio", "0.5"),
                                           ("force", "true"), ("files", '["a", "b"]'), ("note", "null"))
    content, calls = GLM.parse(text, TOOLS)
    assert content == "I will edit it." and len(calls) == 1
    assert json.loads(calls[0].arguments) == {"path": "12", "line": 12, "ratio": 0.5, "force": True,
                                              "files": ["a", "b"], "note": "null"}  # a string may be null: text


def test_a_parameter_no_schema_describes_takes_the_json_it_spells_as_vllm_reads_it():
    text = call_text("run", ("n", "3"), ("flags", '{"v": 1}'), ("ok", "True"), ("cmd", "ls -la"), ("x", "NaN"))
    assert arguments(text) == [("run", {"n": 3, "flags": {"v": 1}, "ok": True, "cmd": "ls -la", "x": "NaN"})]
    assert arguments(text, tools=None) == arguments(text)


def test_values_lose_the_whitespace_around_them_and_keep_their_own_lines():
    assert arguments(call_text("edit", ("path", "\n  a b.py \n"), ("content", "x = 1\n\ny = 2"))) == [
        ("edit", {"path": "a b.py", "content": "x = 1\n\ny = 2"})]


def test_glm_4_7_writes_the_first_key_right_after_the_name_and_a_call_may_have_no_arguments():
    text = call_text("edit", ("line", "4"), newline=False) + "\n<tool_call>status\n</tool_call>"
    assert arguments(text) == [("edit", {"line": 4}), ("status", {})]
    assert arguments("<tool_call>status</tool_call>") == [("status", {})]


def test_a_malformed_call_is_shown_as_text_not_dropped():
    for text in ["<tool_call>edit\nstray words\n<arg_key>line</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
                 "<tool_call>edit\n<arg_key>line</arg_key>\n</tool_call>",  # a key without its value
                 "<tool_call>edit\n<arg_key>line</arg_key>\n<arg_value>1\n</tool_call>",  # value left open
                 "<tool_call>\n<arg_key>line</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",  # no name
                 '<tool_call>\n{"name": "edit", "arguments": {}}\n</tool_call>',  # Hermes' syntax is not this one
                 "See <tool_call>the docs</tool_call> first."]:
        assert GLM.parse(text, TOOLS) == (text, []), text


def test_a_call_cut_off_before_its_closing_tag_counts_if_its_last_value_closed():
    content, calls = GLM.parse(call_text("edit", ("line", "7")).removesuffix("</tool_call>"), TOOLS)
    assert content == "" and [json.loads(c.arguments) for c in calls] == [{"line": 7}]


def test_a_forced_call_starts_with_the_named_function():
    prefix = GLM.forced_prefix("edit")
    assert prefix == "<tool_call>edit\n"
    assert arguments(prefix + "<arg_key>line</arg_key>\n<arg_value>2</arg_value>\n</tool_call>") == [
        ("edit", {"line": 2})]


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.sampled_from(["path", "line", "content", "x_1"]), VALUES, max_size=4))
def test_format_is_what_the_parser_reads_back_with_the_schema_of_the_values(args):
    args = {key: value for key, value in args.items()  # what the syntax cannot hold: whitespace around, a tag
            if not (isinstance(value, str) and (value != value.strip() or "</arg_value>" in value
                                                or "</tool_call>" in value))}
    schema = {"type": "object", "properties": {key: {"type": TYPE_OF[type(value)]} for key, value in args.items()}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = GLM.format([ToolCall("call_1", "f", json.dumps(args, ensure_ascii=False))])
    (call,) = GLM.parse(text, tools)[1]
    assert json.loads(call.arguments) == args


pieces = st.lists(st.sampled_from(["Hi", " there", "\n", "<tool_call>", "</tool_call>", "<tool", "_call>", "edit",
                                   "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "line", "12", "<",
                                   "é", "  ", "<arg_", "value>"]), max_size=16)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    streamed, at_once = streamed_and_whole(GLM, whole, cuts, TOOLS)
    assert streamed == at_once


def test_under_a_glm_style_template_typed_calls_extend_cleanly_and_prompts_render_as_the_template(policy):
    """The policy's tokenizer under a template that writes calls in this syntax: the harness gets typed
    arguments; sent back, the model's calls render as sampled, so every call extends its segment with no
    realignment, and each prompt is the template's own render of the history."""
    template = under(policy, GLM_TEMPLATE)
    turns = [ScriptTurn(text="Let me look.", tool_calls=[{"name": "edit", "arguments": {"path": "a.py", "line": 3}}]),
             ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "b.py", "files": ["x", "y"]}},
                                    {"name": "edit", "arguments": {"force": False, "ratio": 0.25}}]),
             ScriptTurn(text="done")]
    proxy = InProcessProxy(turns, tool_parser="glm45", template=template)

    messages, trajectory = tool_loop(proxy, TOOLS, len(turns))
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
    assert [json.loads(m["function"]["arguments"]) for m in messages[2]["tool_calls"]] == [{"path": "a.py", "line": 3}]
    assert [m["function"]["arguments"] for m in messages[4]["tool_calls"]] == [
        '{"path": "b.py", "files": ["x", "y"]}', '{"force": false, "ratio": 0.25}']
    history = copy.deepcopy(messages[:7])  # as the template takes it: arguments as objects
    for message in history:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    assert template.decode(proxy.engine.prompts[-1], False) == template.full_render(history, TOOLS, True)
