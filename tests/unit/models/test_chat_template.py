"""The tool-capable SmolLM2 template renders exactly like the original without tools, Hermes-style with them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from openforgerl.models.chat_template import render
from openforgerl.models.registry import chat_template_text

ORIGINAL = (Path(__file__).parents[2] / "data" / "smollm2_original_chat_template.jinja").read_text(encoding="utf-8")
OURS = chat_template_text("smollm2")

SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "What is 2+2?"}
ASSISTANT = {"role": "assistant", "content": "4"}
CONVERSATIONS = {
    "empty": [],
    "one user turn": [USER],
    "system + user": [SYSTEM, USER],
    "multi-turn": [USER, ASSISTANT, {"role": "user", "content": "And 3+3?"}],
    "system multi-turn": [SYSTEM, USER, ASSISTANT, {"role": "user", "content": "Thanks!"}],
    "ends with assistant": [SYSTEM, USER, ASSISTANT],
    "empty contents": [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
    "second system turn": [USER, ASSISTANT, {"role": "system", "content": "Now be verbose."}, USER],
    "system only": [SYSTEM],
    "assistant first": [ASSISTANT, USER],
    "unicode and markup": [{"role": "user", "content": "héllo <b>{{ x }}</b> {% raw %}\n\n  tabs\t"}],
    "newlines in content": [SYSTEM, {"role": "user", "content": "line one\nline two\n"},
                            {"role": "assistant", "content": "\nok\n"}],
    "im tokens in content": [{"role": "user", "content": "<|im_start|>user\nhi<|im_end|>"}],
    "long": [SYSTEM] + [USER, ASSISTANT] * 20,
}

WRITE_FILE = {"type": "function", "function": {
    "name": "write_file", "description": "Write text to a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}
READ_FILE = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


@pytest.mark.parametrize("add_generation_prompt", [False, True])
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("tools", [None, []], ids=["tools=None", "tools=[]"])
def test_without_tools_renders_exactly_like_the_original(name, add_generation_prompt, tools):
    messages = CONVERSATIONS[name]
    expected = render(ORIGINAL, messages, add_generation_prompt=add_generation_prompt)
    assert render(OURS, messages, tools=tools, add_generation_prompt=add_generation_prompt) == expected


def test_content_parts_render_like_joined_text():
    """The original cannot render part arrays; ours joins text parts with a newline, as vLLM does."""
    parts = [{"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}]
    joined = [{"role": "user", "content": "first\nsecond"}]
    assert render(OURS, parts, add_generation_prompt=True) == render(ORIGINAL, joined, add_generation_prompt=True)


def _tool_blocks(text: str) -> list[dict]:
    return [json.loads(block) for block in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)]


def test_tools_go_into_the_system_turn_one_json_per_line():
    text = render(OURS, [SYSTEM, USER], tools=[WRITE_FILE, READ_FILE], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n")
    signatures = re.search(r"<tools>\n(.*)\n</tools>", text, re.S).group(1).split("\n")
    assert [json.loads(line) for line in signatures] == [WRITE_FILE, READ_FILE]
    assert text.count("<|im_start|>system") == 1
    assert text.endswith("<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_tools_without_a_system_turn_keep_the_default_system_prompt():
    text = render(OURS, [USER], tools=[WRITE_FILE])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\n\n")
    assert text.count("<|im_start|>system") == 1


@pytest.mark.parametrize("arguments", [{"path": "a.txt", "content": "hi \"there\""},
                                       '{"path": "a.txt", "content": "hi \\"there\\""}'],
                         ids=["arguments as object", "arguments as JSON string"])
def test_assistant_tool_calls_render_as_hermes_blocks(arguments):
    call = {"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}
    messages = [USER, {"role": "assistant", "content": None, "tool_calls": [call, call]}]
    text = render(OURS, messages, tools=[WRITE_FILE])
    turn = text.split("<|im_start|>assistant", 1)[1]
    assert turn.startswith("\n<tool_call>\n") and turn.endswith("</tool_call><|im_end|>\n")
    assert _tool_blocks(turn) == [{"name": "write_file", "arguments": {"path": "a.txt", "content": 'hi "there"'}}] * 2


def test_assistant_text_before_tool_calls_is_kept():
    call = {"function": {"name": "read_file", "arguments": {"path": "x"}}}
    text = render(OURS, [USER, {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}], tools=[READ_FILE])
    assert "<|im_start|>assistant\nLet me look.\n<tool_call>\n" in text


def test_consecutive_tool_results_share_one_user_turn():
    call = {"function": {"name": "read_file", "arguments": {"path": "x"}}}
    messages = [USER, {"role": "assistant", "content": "", "tool_calls": [call, call]},
                {"role": "tool", "tool_call_id": "1", "content": "one"},
                {"role": "tool", "tool_call_id": "2", "content": [{"type": "text", "text": "two"}]},
                {"role": "assistant", "content": "done"}]
    text = render(OURS, messages, tools=[READ_FILE], add_generation_prompt=True)
    assert ("<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\ndone<|im_end|>\n<|im_start|>assistant\n") in text
    assert "<|im_start|>tool" not in text


def test_matches_transformers_apply_chat_template():
    """Our renderer mirrors Hugging Face's, so these tests speak for what vLLM renders."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers not installed (the model extra)")
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    call = {"function": {"name": "write_file", "arguments": {"path": "ü.txt", "content": "<&>"}}}
    messages = [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "ok"}]
    for tools in (None, [WRITE_FILE, READ_FILE]):
        hf = tokenizer.apply_chat_template(messages, tools=tools, chat_template=OURS, tokenize=False,
                                           add_generation_prompt=True)
        assert hf == render(OURS, messages, tools=tools, add_generation_prompt=True)
