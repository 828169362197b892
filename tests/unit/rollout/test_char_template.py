"""CharTemplate, the proxy tests' stand-in tokenizer: exact round trips, ChatML markers as special
ids, a concatenative render in the policy template's format, and the hermes parser reading back
what the scripted engine writes through it."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from openforgerl.models.chat_template import render as render_jinja
from openforgerl.models.registry import chat_template_text
from openforgerl.rollout.proxy.conversation import assistant_message
from openforgerl.rollout.proxy.engine import ScriptedEngineConfig, ScriptTurn
from openforgerl.rollout.proxy.engines.scripted import ScriptedEngine
from openforgerl.rollout.proxy.lineage import message_reply_key, reply_key
from openforgerl.rollout.proxy.template import IncrementalDecoder
from openforgerl.rollout.proxy.tool_parser import make_tool_parser
from openforgerl.testing.chat import CharTemplate

TEMPLATE = CharTemplate()
HERMES = make_tool_parser("hermes")
START, END = 256, 257

# -- tokens -------------------------------------------------------------------------------------


@settings(max_examples=80)
@given(text=st.text())
def test_any_text_round_trips_exactly(text):
    assert TEMPLATE.decode(TEMPLATE.encode(text), skip_special=False) == text


@given(parts=st.lists(st.one_of(st.text(max_size=8), st.sampled_from(["<|im_start|>", "<|im_end|>"])), max_size=8))
def test_turn_markers_become_special_ids_and_skip_special_drops_them(parts):
    text = "".join(parts)
    ids = TEMPLATE.encode(text)
    assert ids.count(START) == text.count("<|im_start|>") and ids.count(END) == text.count("<|im_end|>")
    assert all(i < 256 for i in ids if i not in (START, END))
    assert TEMPLATE.decode(ids) == text.replace("<|im_start|>", "").replace("<|im_end|>", "")


def test_markers_and_stop_ids_are_what_an_hf_chatml_tokenizer_gives():
    assert TEMPLATE.encode("<|im_start|>user\nhé<|im_end|>") == [START, *b"user\n", *"hé".encode(), END]
    assert TEMPLATE.encode("<|im_end") == list(b"<|im_end")  # only the whole marker is special
    assert TEMPLATE.stop_ids == frozenset({END}) and TEMPLATE.end_of_turn == "<|im_end|>"
    table = TEMPLATE.token_bytes()
    assert table[START] == table[END] == b"" and table[ord("a")] == b"a" and len(table) == 258


class WindowDecoded(CharTemplate):
    """The same ids without a byte table: IncrementalDecoder falls back to its sliding window."""

    def token_bytes(self):
        return None


@settings(max_examples=100, deadline=None)
@given(text=st.lists(st.sampled_from(list("ab é😀中\n<>{}\"") + ["<|im_end|>"]), max_size=40).map("".join))
def test_incremental_decoding_never_splits_characters_with_or_without_the_byte_table(text):
    for template in (TEMPLATE, WindowDecoded()):
        ids = template.encode(text)
        decoder = IncrementalDecoder(template)
        deltas = [decoder.push([i]) for i in ids] + [decoder.flush()]
        assert "".join(deltas) == template.decode(ids)
        assert all("\ufffd" not in d for d in deltas)


# -- render -------------------------------------------------------------------------------------

words = st.text(alphabet=st.sampled_from(list("abc xyz.\n{}\"é😀<>")), max_size=12)
arguments = st.dictionaries(st.sampled_from(["path", "n", "ü"]), st.one_of(st.integers(), words), max_size=2)
call = st.builds(lambda name, args, as_text: {"id": "c", "type": "function", "function": {
    "name": name, "arguments": json.dumps(args) if as_text else args}},
    st.sampled_from(["ls", "cat"]), arguments, st.booleans())
content = st.one_of(words, st.none(), st.lists(st.one_of(words, st.builds(lambda t: {"type": "text", "text": t}, words),
                                                         st.just({"type": "image_url"})), max_size=3))
message = st.one_of(
    st.builds(lambda c: {"role": "user", "content": c}, content),
    st.builds(lambda c: {"role": "system", "content": c}, content),
    st.builds(lambda c: {"role": "assistant", "content": c}, content),
    st.builds(lambda c, calls: {"role": "assistant", "content": c, "tool_calls": calls}, content,
              st.lists(call, min_size=1, max_size=2)),
    st.builds(lambda c: {"role": "tool", "tool_call_id": "c", "content": c}, content))
TOOL = [{"type": "function", "function": {"name": "ls", "description": "List <dir> ü",
                                          "parameters": {"type": "object"}}}]
tools = st.sampled_from([None, [], TOOL])


@settings(max_examples=120)
@given(messages=st.lists(message, min_size=1, max_size=8), tools=tools, data=st.data())
def test_render_is_concatenative(messages, tools, data):
    k = data.draw(st.integers(1, len(messages)))
    whole = TEMPLATE.render(messages, tools, data.draw(st.booleans()))
    assert whole.startswith(TEMPLATE.render(messages[:k], tools, False))
    if k < len(messages) and messages[k]["role"] == "assistant":
        assert whole.startswith(TEMPLATE.render(messages[:k], tools, True))


def single_tool_results(messages: list[dict]) -> bool:
    return all(not (a["role"] == b["role"] == "tool") for a, b in zip(messages, messages[1:], strict=False))


@settings(max_examples=80)
@given(system=content, rest=st.lists(message, max_size=6).filter(single_tool_results), tools=tools,
       generation=st.booleans())
def test_renders_the_shipped_smollm2_template_text_when_it_starts_with_a_system_turn(system, rest, tools, generation):
    """The stand-in differs from the policy's template in token ids only (the shipped template gives
    a missing system turn a default prompt, and merges consecutive tool results into one turn)."""
    messages = [{"role": "system", "content": system}, *rest]
    expected = render_jinja(chat_template_text("smollm2"), messages, tools=tools, add_generation_prompt=generation)
    assert TEMPLATE.render(messages, tools, generation) == expected


def test_the_layout_is_hermes_chatml():
    calls = [{"function": {"name": "ls", "arguments": {"path": "."}}}]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "content": "a.txt"}]
    text = TEMPLATE.render(messages, TOOL, True)
    assert text.startswith("<|im_start|>system\n# Tools\n") and '<tools>\n{"type": "function", ' in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n"
                         '<|im_start|>assistant\n<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n'
                         "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\na.txt\n</tool_response>"
                         "<|im_end|>\n<|im_start|>assistant\n")
    assert TEMPLATE.render([{"role": "user", "content": "hi"}], None, False) == "<|im_start|>user\nhi<|im_end|>\n"


# -- with the hermes parser and the scripted engine ---------------------------------------------

plain = st.text(alphabet=st.sampled_from(list("abc xyz.,!?\n")), max_size=20).map(str.strip)
ascii_arguments = st.dictionaries(st.sampled_from(["path", "n"]), st.one_of(st.integers(), plain), max_size=2)
script_turn = st.builds(lambda text, calls: ScriptTurn(text=text, tool_calls=calls), plain, st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["ls", "cat"]), "arguments": ascii_arguments}), max_size=2))


@settings(max_examples=80, deadline=None)
@given(turn=script_turn)
def test_what_the_scripted_engine_writes_the_parser_reads_back_and_the_template_re_renders(turn):
    """The condition for a 'clean' continuation: the parsed answer renders back to the sampled text."""
    engine = ScriptedEngine(ScriptedEngineConfig(turns=[turn]), template=TEMPLATE, tool_parser=HERMES)
    sampled = engine.turn_ids(turn)
    assert sampled[-1] == END and END not in sampled[:-1]
    text, calls = HERMES.parse(TEMPLATE.decode(sampled))
    assert (text, [(c.name, json.loads(c.arguments)) for c in calls]) == \
        (turn.text, [(c["name"], c["arguments"]) for c in turn.tool_calls])
    history = [{"role": "user", "content": "go"}]
    reply = assistant_message(text, calls)
    prompt = TEMPLATE.render(history, TOOL, True)
    assert TEMPLATE.render(history + [reply], TOOL, False) == prompt + TEMPLATE.decode(sampled, False) + "\n"
    assert message_reply_key(reply) == reply_key(text, [(c.name, c.arguments_object()) for c in calls])


def test_the_proxy_test_doubles_never_load_transformers():
    script = ("import asyncio, sys\n"
              "from openforgerl.testing.proxy import PATHS, InProcessProxy\n"
              "async def call(proxy):\n"
              "    async with proxy.client() as client:\n"
              "        _, token = await proxy.new_rollout(client)\n"
              "        body = {'messages': [{'role': 'user', 'content': 'hi'}]}\n"
              "        auth = {'authorization': f'Bearer {token}'}\n"
              "        resp = await client.post(PATHS['chat'], json=body, headers=auth)\n"
              "        assert resp.json()['choices'][0]['message']['content'] == 'ok', resp.text\n"
              "asyncio.run(call(InProcessProxy()))\n"
              "assert 'transformers' not in sys.modules and 'tokenizers' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
