"""Qwen3-Coder's tool calls (``proxy.tool_parser = "qwen3_coder"``): XML-like blocks whose untyped parameter texts
take their JSON types from the call's tool schemas, so a harness gets the arguments its tools declare."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import CODER_TEMPLATE, TYPE_OF, VALUES, under

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.engine import ScriptTurn
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.proxy import InProcessProxy, streamed_and_whole, tool_loop

CODER = make_tool_parser("qwen3_coder")
SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "ratio": {"type": "number"},
    "force": {"type": "boolean"}, "options": {"type": "object"}, "files": {"type": "array"},
    "limit": {"type": ["integer", "null"]}, "mode": {"enum": ["a", "b"]}}}
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": SCHEMA}}]


def call_text(name: str, *parameters: tuple[str, str]) -> str:
    inner = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters)
    return f"<tool_call>\n<function={name}>\n{inner}</function>\n</tool_call>"


def arguments(text: str, tools=TOOLS) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in CODER.parse(text, tools)[1]]


def test_parameters_take_the_types_their_schema_declares():
    text = "I will edit it.\n" + call_text(
        "edit", ("path", "src/a.py"), ("line", "12"), ("ratio", "0.5"), ("force", "True"),
        ("options", '{"indent": 4}'), ("files", '["a", "b"]'), ("limit", "null"), ("mode", "b"))
    content, calls = CODER.parse(text, TOOLS)
    assert content == "I will edit it." and len(calls) == 1
    assert json.loads(calls[0].arguments) == {"path": "src/a.py", "line": 12, "ratio": 0.5, "force": True,
                                              "options": {"indent": 4}, "files": ["a", "b"], "limit": None,
                                              "mode": "b"}


def test_a_text_that_does_not_spell_its_declared_type_stays_the_text_the_model_wrote():
    text = call_text("edit", ("line", "twelve"), ("force", "1"), ("ratio", "NaN"), ("files", "a.py"),
                     ("path", "12"), ("extra", '{"a": 1}'))
    assert arguments(text) == [("edit", {"line": "twelve", "force": "1", "ratio": "NaN", "files": "a.py",
                                         "path": "12", "extra": '{"a": 1}'})]  # strings stay strings


def test_types_from_schema_branches_and_schemas_of_any_shape():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "b": {"oneOf": "not a list"},
        "c": {"type": 7}, "d": "not a schema", "e": {"enum": [1, 2]}}}}},
             {"type": "function", "function": {"name": "g", "parameters": None}}, {"function": "nonsense"}, 3]
    text = call_text("f", ("a", "4"), ("b", "4"), ("c", "4"), ("d", "4"), ("e", "4")) + call_text("g", ("x", "4"))
    assert arguments(text, tools) == [("f", {"a": 4, "b": "4", "c": "4", "d": "4", "e": "4"}), ("g", {"x": "4"})]


def test_without_the_tools_every_parameter_is_its_text():
    assert arguments(call_text("edit", ("line", "12"), ("force", "true")), None) == [
        ("edit", {"line": "12", "force": "true"})]


def test_a_value_keeps_its_own_blank_lines_and_indentation_less_the_newlines_around_it():
    body = "\n    def f():\n        return 1\n\n"
    assert arguments(call_text("edit", ("path", "a.py"), ("text", body))) == [
        ("edit", {"path": "a.py", "text": body})]


def test_a_parameter_left_unclosed_ends_where_the_next_one_opens():
    text = "<tool_call>\n<function=edit>\n<parameter=path>\na.py\n<parameter=line>\n3\n</parameter>\n" \
           "</function>\n</tool_call>"
    assert arguments(text) == [("edit", {"path": "a.py", "line": 3})]


def test_two_calls_and_the_text_between_them():
    text = "First.\n" + call_text("edit", ("line", "1")) + "\n" + call_text("run", ("cmd", "ls -la"))
    assert arguments(text) == [("edit", {"line": 1}), ("run", {"cmd": "ls -la"})]
    assert CODER.parse(text, TOOLS)[0] == "First."


def test_a_malformed_call_is_shown_as_text_not_dropped():
    for text in ["<tool_call>\n<function=edit>\nstray words\n<parameter=line>\n1\n</parameter>\n</function>\n"
                 "</tool_call>",
                 "<tool_call>\n<function=edit>\n<parameter=line>\n1\n</parameter>\n</tool_call>",  # no </function>
                 "<tool_call>\n<function=>\n</function>\n</tool_call>",
                 '<tool_call>\n{"name": "edit", "arguments": {}}\n</tool_call>']:  # Hermes' syntax is not this one
        assert CODER.parse(text, TOOLS) == (text, [])


def test_a_call_cut_off_before_its_closing_tag_counts_if_its_function_closed():
    content, calls = CODER.parse(call_text("edit", ("line", "7")).removesuffix("\n</tool_call>"), TOOLS)
    assert content == "" and [json.loads(c.arguments) for c in calls] == [{"line": 7}]
    assert CODER.parse("<tool_call>\n<function=edit>\n<parameter=line>\n7", TOOLS) == (
        "<tool_call>\n<function=edit>\n<parameter=line>\n7", [])


def bare(name: str, *parameters: tuple[str, str]) -> str:
    return call_text(name, *parameters).removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")


def test_a_call_without_its_wrapper_is_a_call_as_vllm_reads_it():
    """Small models often skip ``<tool_call>``; vLLM's own qwen3_coder parser still reads the function as a call,
    so a policy trained through the proxy is served as it will be served later."""
    text = "Let me fix it.\n" + bare("edit", ("line", "3")) + "\n" + bare("run", ("cmd", "make test"))
    assert arguments(text) == [("edit", {"line": 3}), ("run", {"cmd": "make test"})]
    assert CODER.parse(text, TOOLS)[0] == "Let me fix it."
    mixed = call_text("edit", ("line", "1")) + "\n" + bare("edit", ("line", "2")) + "\nDone."
    assert arguments(mixed) == [("edit", {"line": 1}), ("edit", {"line": 2})]
    assert CODER.parse(mixed, TOOLS)[0] == "\nDone."  # as after a wrapped call


def test_a_bare_call_that_is_malformed_or_cut_off_stays_the_text_the_model_wrote():
    for text in ["Then <function=edit> is what I call.",  # never closed: cut off, or a mention in prose
                 "<function=edit>\nstray words\n</function>",
                 "<function=>\n</function>",
                 bare("edit", ("line", "7")).removesuffix("\n</function>")]:
        assert CODER.parse(text, TOOLS) == (text, []), text


def test_a_forced_call_starts_with_the_named_function():
    prefix = CODER.forced_prefix("edit")
    assert prefix == "<tool_call>\n<function=edit>\n"
    assert arguments(prefix + "<parameter=line>\n2\n</parameter>\n</function>\n</tool_call>") == [
        ("edit", {"line": 2})]


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.sampled_from(["path", "line", "content", "x_1"]), VALUES, max_size=4))
def test_format_is_what_the_parser_reads_back_with_the_schema_of_the_values(args):
    args = {key: value for key, value in args.items()
            if not (isinstance(value, str) and (value.startswith("\n") and value.endswith("\n")
                                                or "</parameter>" in value or "\n<parameter=" in value))}
    schema = {"type": "object", "properties": {key: {"type": TYPE_OF[type(value)]} for key, value in args.items()}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = CODER.format([ToolCall("call_1", "f", json.dumps(args, ensure_ascii=False))])
    (call,) = CODER.parse(text, tools)[1]
    assert json.loads(call.arguments) == args


pieces = st.lists(st.sampled_from(["Hi", " there", "\n", "<tool_call>", "</tool_call>", "<tool", "_call>",
                                   "<function=edit>", "</function>", "<parameter=line>", "</parameter>", "12",
                                   "<parameter=path>", "a.py", "<", "é", "  ", "\n<parameter=", "<func",
                                   "tion=run>", "</func", "tion>"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    streamed, at_once = streamed_and_whole(CODER, whole, cuts, TOOLS)
    assert streamed == at_once


def calls_seen(proxy: InProcessProxy, calls: int) -> tuple[list, dict]:
    messages, trajectory = tool_loop(proxy, TOOLS, calls)
    return [[(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []]
            for m in messages if m["role"] == "assistant"], trajectory


def test_through_the_proxy_a_harness_gets_typed_arguments_and_its_loop_stays_one_segment(policy):
    """The proxy reads the model's answer with the call's tools, and reads it so again when the next call sends
    it back: the typed arguments match, and the rollout extends instead of forking at every call."""
    turns = [ScriptTurn(text="Looking.", tool_calls=[{"name": "edit", "arguments": {"path": "a.py", "line": 3,
                                                                                    "force": True}}]),
             ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "b.py", "line": 40, "force": False}}]),
             ScriptTurn(text="done")]
    proxy = InProcessProxy(turns, tool_parser="qwen3_coder", template=under(policy, CODER_TEMPLATE))
    seen, trajectory = calls_seen(proxy, len(turns))
    assert seen == [[("edit", {"path": "a.py", "line": 3, "force": True})],
                    [("edit", {"path": "b.py", "line": 40, "force": False})], []]
    assert trajectory["counts"]["fork"] == 0 and len(trajectory["segments"]) == 1


def test_through_the_proxy_a_bare_call_reaches_the_harness_as_a_call_and_its_loop_stays_one_segment(policy):
    """The model skips the wrapper: the harness still gets the call, and when it sends it back the rollout extends
    the segment holding the tokens the model sampled (bare), not a re-render of them."""
    turns = [ScriptTurn(text="Looking.\n" + bare("edit", ("path", "a.py"), ("line", "3"))),
             ScriptTurn(text=bare("edit", ("force", "true"))), ScriptTurn(text="done")]
    proxy = InProcessProxy(turns, tool_parser="qwen3_coder", template=under(policy, CODER_TEMPLATE))
    seen, trajectory = calls_seen(proxy, len(turns))
    assert seen == [[("edit", {"path": "a.py", "line": 3})], [("edit", {"force": True})], []]
    assert trajectory["counts"]["fork"] == 0 and len(trajectory["segments"]) == 1


def test_under_a_qwen3_coder_style_template_typed_calls_extend_cleanly_and_prompts_render_as_the_template(policy):
    """The policy's tokenizer under a template that writes calls in this syntax: the model's calls (strings,
    integers, a list) come back from the harness and render as sampled, so every call extends its segment with
    no realignment, and each prompt is the template's own render of the history."""
    template = under(policy, CODER_TEMPLATE)
    turns = [ScriptTurn(text="Let me look.", tool_calls=[{"name": "edit", "arguments": {"path": "a.py", "line": 3}}]),
             ScriptTurn(tool_calls=[{"name": "edit", "arguments": {"path": "b.py", "files": ["x", "y"]}},
                                    {"name": "edit", "arguments": {"line": 40, "ratio": 0.25}}]),
             ScriptTurn(text="done")]
    proxy = InProcessProxy(turns, tool_parser="qwen3_coder", template=template)

    messages, trajectory = tool_loop(proxy, TOOLS, len(turns))
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
    assert [m["function"]["arguments"] for m in messages[4]["tool_calls"]] == [
        '{"path": "b.py", "files": ["x", "y"]}', '{"line": 40, "ratio": 0.25}']
    history = copy.deepcopy(messages[:7])  # as the template takes it: arguments as objects
    for message in history:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    assert template.decode(proxy.engine.prompts[-1], False) == template.full_render(history, TOOLS, True)
