"""DeepSeek's tool calls (``deepseek_v31``, ``deepseek_v3``): a section of calls between markers that the tokenizer
holds as tokens of their own. Where those are special tokens, decoding a sampled answer leaves them out, so the proxy
keeps a parser's markers in the text it reads: without that every call the policy made reached the harness as text
(``forge_probe{"path": ...}``) and no tool ever ran."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_syntax import DEEPSEEK_V3_TEMPLATE, DEEPSEEK_V31_TEMPLATE, LOOP_CALLS, calls_of, harness_loop, under

from openforgerl.rollout.proxy.conversation import TextDelta, ToolCall, ToolCallDone
from openforgerl.rollout.proxy.template import IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import kept_markers, make_tool_parser, tool_parser_for, written_call
from openforgerl.rollout.proxy.tool_parsers.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, MARKERS, SEP
from openforgerl.testing.proxy import streamed_and_whole

V31, V3 = make_tool_parser("deepseek_v31"), make_tool_parser("deepseek_v3")
TOOLS = [{"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}]


def calls(parser, text: str) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in parser.parse(text, TOOLS)[1]]


def v31(*made: tuple[str, str]) -> str:
    return CALLS_BEGIN + "".join(f"{CALL_BEGIN}{name}{SEP}{args}{CALL_END}" for name, args in made) + CALLS_END


def test_a_section_of_calls_is_calls_and_the_text_before_it_stays_text():
    content, (call,) = V31.parse("Let me look.\n" + v31(("edit", '{"path": "a.py", "line": 3}')))
    assert content == "Let me look."
    assert (call.name, json.loads(call.arguments)) == ("edit", {"path": "a.py", "line": 3})
    assert calls(V31, v31(("edit", '{"path": "a.py"}'), ("ls", "{}"))) == [("edit", {"path": "a.py"}), ("ls", {})]
    v3 = (f'{CALLS_BEGIN}{CALL_BEGIN}function{SEP}edit\n```json\n{{"line": 2}}\n```{CALL_END}\n'
          f'{CALL_BEGIN}function{SEP}ls\n```json\n{{}}\n```{CALL_END}{CALLS_END}')
    assert calls(V3, v3) == [("edit", {"line": 2}), ("ls", {})]
    assert calls(V31, v3) == [] and calls(V3, v31(("ls", "{}"))) == []  # each reads its own version only
    # cut off before the section's end (a length stop): the calls that are whole count
    assert calls(V31, v31(("ls", "{}"))[:-len(CALLS_END)]) == [("ls", {})]


def test_a_section_that_is_not_whole_calls_is_text_as_the_model_wrote_it():
    for text in [v31(("edit", "{not json")), v31(("edit", '["a list"]')), v31(("", "{}")), v31(("two words", "{}")),
                 CALLS_BEGIN + CALL_BEGIN + "edit{}" + CALL_END + CALLS_END,  # no separator
                 CALLS_BEGIN + "prose" + v31(("ls", "{}"))[len(CALLS_BEGIN):],  # prose between the calls
                 v31(("ls", "{}"))[:-len(CALL_END + CALLS_END)],  # cut off inside a call
                 CALLS_BEGIN + CALLS_END]:
        assert V31.parse(text, TOOLS) == (text, []), text


@settings(max_examples=200, deadline=None)
@given(made=st.lists(st.tuples(st.from_regex(r"[a-z_][a-z0-9_.]{0,8}", fullmatch=True),
                               st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=6), max_size=3)),
                     min_size=1, max_size=3))
def test_format_is_what_the_parser_reads_back(made):
    for parser in (V31, V3):
        text = parser.format([ToolCall(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(made)])
        assert calls(parser, text) == [(name, args) for name, args in made]


def test_a_forced_call_starts_with_the_named_function():
    assert calls(V31, V31.forced_prefix("edit") + f'{{"line": 2}}{CALL_END}{CALLS_END}') == [("edit", {"line": 2})]
    assert calls(V3, V3.forced_prefix("edit") + f'{{"line": 2}}\n```{CALL_END}{CALLS_END}') == [("edit", {"line": 2})]
    assert calls(V31, V31.forced_prefix(None) + f'ls{SEP}{{}}{CALL_END}') == [("ls", {})]  # cut off: whole calls count


pieces = st.lists(st.sampled_from([
    "Hi", " there", "\n", CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, "edit", '{"line": 1}', "{bad", "<｜tool",
    "▁calls▁begin｜>", "function", "```json\n", "\n```", "  ", "é"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    for parser in (V31, V3):
        streamed, at_once = streamed_and_whole(parser, whole, cuts, TOOLS)
        assert streamed == at_once


@pytest.mark.parametrize("special", [True, False], ids=["special-markers", "plain-added-markers"])
def test_auto_takes_the_deepseek_parser_of_the_template_s_version(policy, special):
    for chat_template, name in [(DEEPSEEK_V31_TEMPLATE, "deepseek_v31"), (DEEPSEEK_V3_TEMPLATE, "deepseek_v3")]:
        template = under(policy, chat_template, MARKERS, special)
        assert type(tool_parser_for(template, "auto")) is type(make_tool_parser(name))
    template = under(policy, DEEPSEEK_V31_TEMPLATE, MARKERS, special)
    # what decoding gives without the parser's markers: with special markers the call is unreadable text
    assert (CALLS_BEGIN in (written_call(template) or "")) is not special
    assert bool(kept_markers(template, V31)) is special


def test_under_deepseek_s_template_the_harness_gets_the_calls_and_every_call_extends_cleanly(policy):
    answers, trajectory = harness_loop(under(policy, DEEPSEEK_V31_TEMPLATE, MARKERS), TOOLS)
    assert [calls_of(a) for a in answers] == LOOP_CALLS and answers[-1]["content"] == "done"
    text = json.dumps(answers, ensure_ascii=False)
    assert "tool▁" not in text and "forge_probe" not in text  # no marker reached the harness
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1  # sent back, they render as sampled


@pytest.mark.parametrize("per_token", [True, False], ids=["byte-table", "window"])
def test_the_stream_decoder_keeps_the_markers_wherever_the_ids_are_cut(policy, per_token):
    template = under(policy, DEEPSEEK_V31_TEMPLATE, MARKERS)
    if not per_token:  # a tokenizer that is not byte-level: decoded over a sliding window
        template.token_bytes = lambda: None  # type: ignore[method-assign]
    kept = kept_markers(template, V31)
    ids = template.encode("Sure é." + v31(("edit", '{"path": "ü.py"}'), ("ls", "{}")) + " done")
    assert template.decode_keeping(ids, kept) == "Sure é." + v31(("edit", '{"path": "ü.py"}'), ("ls", "{}")) + " done"
    for step in (1, 2, 5):
        decoder = IncrementalDecoder(template, kept)
        text = "".join(decoder.push(ids[at:at + step]) for at in range(0, len(ids), step)) + decoder.flush()
        assert text == template.decode_keeping(ids, kept)
    assert IncrementalDecoder(template).push(ids) == template.decode(ids)  # without markers: as before


def test_a_malformed_section_reaches_the_harness_as_the_text_the_model_wrote(policy):
    events = V31.stream(TOOLS).feed("ok " + v31(("edit", "{oops")) + " more") + V31.stream(TOOLS).finish()
    assert [e for e in events if isinstance(e, ToolCallDone)] == []
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).startswith("ok " + CALLS_BEGIN)


def test_a_template_that_takes_arguments_only_as_text_gets_them_so(policy):
    """DeepSeek V3.1's own template concatenates each call's arguments (``... + arguments + ...``): given an object,
    as transformers' convention and the proxy pass them, it fails, and every call with a tool call in its history
    was refused. The template is found to take text, and is given the arguments' JSON."""
    concatenating = DEEPSEEK_V31_TEMPLATE.replace("(c.function.arguments | tojson)", "c.function.arguments")
    assert concatenating != DEEPSEEK_V31_TEMPLATE
    template = under(policy, concatenating, MARKERS)
    assert type(tool_parser_for(template, "auto")) is type(V31)
    answers, trajectory = harness_loop(template, TOOLS)
    assert [calls_of(a) for a in answers] == LOOP_CALLS
    assert trajectory["counts"]["clean"] == 3 and len(trajectory["segments"]) == 1
