"""Tool-call parsing and incremental decoding: a stream says exactly what the whole turn says."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforgerl.errors import UnknownNameError
from openforgerl.rollout.proxy.conversation import TextDelta, ToolCall, ToolCallDone
from openforgerl.rollout.proxy.template import IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.rollout.proxy.tool_parsers.hermes import partial_marker_len
from openforgerl.testing.chat import CharTemplate

HERMES = make_tool_parser("hermes")


def stream_parse(chunks: list[str]) -> tuple[str, list[tuple[str, str]]]:
    stream = HERMES.stream()
    events = [e for chunk in chunks for e in stream.feed(chunk)] + stream.finish()
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    return text, [(e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallDone)]


def test_text_and_calls_are_separated():
    text = 'Let me look.\n<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "cat", "arguments": {"file": "a"}}\n</tool_call>'
    content, calls = HERMES.parse(text)
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("ls", {"path": "."}), ("cat", {"file": "a"})]


def test_a_malformed_call_is_shown_as_text_not_dropped():
    content, calls = HERMES.parse("<tool_call>\n{not json}\n</tool_call>")
    assert calls == [] and content == "<tool_call>\n{not json}\n</tool_call>"
    text = "See:\n\n<tool_call>\n{not json}\n</tool_call> and  <tool_call>\n{bad}"  # its spaces kept as written
    assert HERMES.parse(text) == (text, []) and stream_parse(list(text)) == (text, [])


def test_a_call_cut_off_before_its_closing_tag_still_counts_if_its_json_is_whole():
    content, calls = HERMES.parse('<tool_call>\n{"name": "ls", "arguments": {}}')
    assert content == "" and calls[0].name == "ls"


def test_unknown_parser_names_list_the_known_ones():
    with pytest.raises(UnknownNameError, match="hermes"):
        make_tool_parser("nope")


pieces = st.lists(st.sampled_from(["Hi", " there", "\n", "<tool_call>", "</tool_call>", "<tool", "_call>",
                                   '{"name": "f", "arguments": {"x": 1}}', "{bad", "<", "é", "  "]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(pieces=pieces, data=st.data())
def test_streaming_in_any_chunking_equals_parsing_the_whole_turn(pieces, data):
    whole = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    chunks = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)])]
    content, calls = HERMES.parse(whole)
    assert stream_parse(chunks) == (content, [(c.name, c.arguments) for c in calls])


def test_format_is_what_the_parser_reads_back():
    calls = [ToolCall("call_1", "write", '{"path": "a"}'), ToolCall("call_2", "run", '{"cmd": "ls"}')]
    assert [(c.name, c.arguments) for c in HERMES.parse(HERMES.format(calls))[1]] == [
        ("write", '{"path": "a"}'), ("run", '{"cmd": "ls"}')]


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("abc é😀中\n<>{}\"")), max_size=40))
def test_incremental_decoding_never_splits_characters(text):
    template = CharTemplate()
    ids = template.encode(text)
    decoder = IncrementalDecoder(template)
    deltas = [decoder.push([i]) for i in ids] + [decoder.flush()]
    assert "".join(deltas) == template.decode(ids)
    assert all("\ufffd" not in d for d in deltas)


@given(text=st.text(alphabet=st.sampled_from(list("<tol_ca>/x")), max_size=30),
       marker=st.sampled_from(["<tool_call>", "</tool_call>", "<<a", "ab"]))
def test_the_held_back_marker_prefix_is_the_longest_suffix_that_starts_the_marker(text, marker):
    longest = max((n for n in range(1, min(len(marker) - 1, len(text)) + 1) if text.endswith(marker[:n])),
                  default=0)
    assert partial_marker_len(text, marker) == longest
