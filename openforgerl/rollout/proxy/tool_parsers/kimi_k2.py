"""Kimi K2's tool calls: a section of calls between markers the tokenizer holds as special tokens, each call's id
naming its function.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{ARGUMENTS}
    <|tool_call_end|>...<|tool_calls_section_end|>

The id the model writes (``functions.NAME:N``, N counting the conversation's calls) is the id the harness gets, as
vLLM's ``kimi_k2`` parser gives it: Kimi's template writes each call's id, and the id a tool's answer is for, back
into the prompt, so the history renders as sampled. The markers are ``markers`` of the parser: the proxy keeps them in
the text this parser reads. A section counts only when all of it is whole calls with well-formed ids (each once) and
JSON objects of arguments; else it stays text, as written. Key invariants, as for Hermes: text that is not a
well-formed section stays text; a stream and the whole turn give the same text and calls.
"""

from __future__ import annotations

import re
from typing import Any

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream
from openforgerl.rollout.proxy.tool_parsers.deepseek import SectionStream
from openforgerl.rollout.proxy.tool_parsers.hermes import arguments_text

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGUMENT_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
MARKERS = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END)
CALL_ID = re.compile(r"functions\.([A-Za-z0-9_\-.]+):([0-9]+)")


def read_call(inner: str) -> ToolCall | None:
    """``functions.NAME:N<|tool_call_argument_begin|>{ARGUMENTS}``."""
    written_id, sep, arguments = inner.partition(ARGUMENT_BEGIN)
    found, text = CALL_ID.fullmatch(written_id.strip()), arguments_text(arguments)
    if not sep or found is None or text is None:
        return None
    return ToolCall(id=found[0], name=found[1], arguments=text)


class KimiStream(SectionStream):
    def __init__(self) -> None:
        super().__init__(read_call, (SECTION_BEGIN, SECTION_END), (CALL_BEGIN, CALL_END))

    def _section(self, body: str) -> list[ToolCall] | None:
        calls = super()._section(body)
        if calls is not None and len({c.id for c in calls}) < len(calls):
            return None  # one id twice: the harness could not tell which answer is for which call
        return calls


class KimiK2ToolParser(ToolParser):
    markers = MARKERS

    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return KimiStream()

    def forced_prefix(self, name: str | None) -> str:
        return SECTION_BEGIN + CALL_BEGIN + (f"functions.{name}:0{ARGUMENT_BEGIN}" if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        """Each call with the id it has when it is one of Kimi's, else ``functions.NAME:I`` (I: its place)."""
        if not calls:
            return ""
        return SECTION_BEGIN + "".join(
            f"{CALL_BEGIN}{c.id if CALL_ID.fullmatch(c.id) else f'functions.{c.name}:{i}'}{ARGUMENT_BEGIN}"
            f"{c.arguments}{CALL_END}" for i, c in enumerate(calls)) + SECTION_END
