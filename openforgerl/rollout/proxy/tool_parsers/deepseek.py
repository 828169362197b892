"""DeepSeek tool calls: a section of calls between markers the tokenizer holds as tokens of their own.

    deepseek_v31 (V3.1, V3.2-Exp):
        <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{ARGUMENTS}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
    deepseek_v3 (V3-0324, R1-0528):
        <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
        ```json
        {ARGUMENTS}
        ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>

The markers are ``markers`` of the parser: where a tokenizer holds them as special tokens (which decoding leaves out
of an answer's text) the proxy keeps them in the text this parser reads (``tool_parser.kept_markers``). A section
counts only when all of it is whole calls (blank space between them), each with a name and a JSON object of
arguments; a section cut off before its end marker counts when every call in it is whole. Key invariants, as for
Hermes: text that is not a well-formed section stays text, shown to the harness as the model wrote it; a stream and
the whole turn give the same text and calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openforgerl.rollout.proxy.conversation import Event, ToolCall, ToolCallDone
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream, new_call_id
from openforgerl.rollout.proxy.tool_parsers.hermes import Block, HermesStream, arguments_text

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
MARKERS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
FENCE_OPEN, FENCE_CLOSE = "```json", "```"


def _call(name: str, arguments: str) -> ToolCall | None:
    """A call to ``name`` with ``arguments`` (a JSON object's text), or None when either is not one."""
    name, text = name.strip(), arguments_text(arguments)
    if not name or any(c.isspace() or c in "<>{}" for c in name) or text is None:
        return None
    return ToolCall(id=new_call_id(), name=name, arguments=text)


def read_v31(inner: str) -> ToolCall | None:
    """``NAME<｜tool▁sep｜>{ARGUMENTS}``."""
    name, sep, arguments = inner.partition(SEP)
    return _call(name, arguments) if sep else None


def read_v3(inner: str) -> ToolCall | None:
    """``function<｜tool▁sep｜>NAME`` then the arguments in a fenced JSON block."""
    kind, sep, rest = inner.partition(SEP)
    name, newline, fenced = rest.partition("\n")
    fenced = fenced.strip()
    if not sep or kind.strip() != "function" or not newline or not fenced.startswith(FENCE_OPEN) or \
            not fenced.endswith(FENCE_CLOSE) or len(fenced) < len(FENCE_OPEN) + len(FENCE_CLOSE):
        return None
    return _call(name, fenced[len(FENCE_OPEN):-len(FENCE_CLOSE)])


def read_section(body: str, read: Callable[[str], ToolCall | None],
                 call: tuple[str, str] = (CALL_BEGIN, CALL_END)) -> list[ToolCall] | None:
    """The calls a section's ``body`` (between its markers) is made of, each between the markers ``call``; None
    unless it is whole calls only."""
    begin, close = call
    calls: list[ToolCall] = []
    rest = body.strip()
    while rest:
        end = rest.find(close)
        if not rest.startswith(begin) or end < 0:
            return None
        made = read(rest[len(begin):end])
        if made is None:
            return None
        calls.append(made)
        rest = rest[end + len(close):].strip()
    return calls or None


def _section(calls: str) -> str:
    """The section holding ``calls`` (their text); none when there are none."""
    return CALLS_BEGIN + calls + CALLS_END if calls else ""


class SectionStream(HermesStream):
    """Text, then sections of calls between the markers ``section``, each call between the markers ``call``
    (``read`` reads what is between those)."""

    def __init__(self, read: Callable[[str], ToolCall | None], section: tuple[str, str] = (CALLS_BEGIN, CALLS_END),
                 call: tuple[str, str] = (CALL_BEGIN, CALL_END)) -> None:
        super().__init__(blocks=(Block(*section),))
        self._read, self._call_markers = read, call

    def _section(self, body: str) -> list[ToolCall] | None:
        return read_section(body, self._read, self._call_markers)

    def _call(self, block: Block, body: str) -> list[Event]:
        calls = self._section(body)
        if calls is None:
            return self._text(block.open + body + block.close)
        self._started, self._pending_space = True, ""
        return [ToolCallDone(call) for call in calls]

    def finish(self) -> list[Event]:
        if self._in_call is None:
            return super().finish()
        rest, self._buffer, block = self._buffer, "", self._in_call  # cut off before the section's end
        self._in_call = None
        calls = self._section(rest)
        if calls is None:
            return self._text(block.open + rest)
        self._pending_space = ""
        return [ToolCallDone(call) for call in calls]


class DeepSeekV31ToolParser(ToolParser):
    markers = MARKERS

    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return SectionStream(read_v31)

    def forced_prefix(self, name: str | None) -> str:
        return CALLS_BEGIN + CALL_BEGIN + (name + SEP if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        return _section("".join(f"{CALL_BEGIN}{c.name}{SEP}{c.arguments}{CALL_END}" for c in calls))


class DeepSeekV3ToolParser(ToolParser):
    markers = MARKERS

    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return SectionStream(read_v3)

    def forced_prefix(self, name: str | None) -> str:
        return CALLS_BEGIN + CALL_BEGIN + "function" + SEP + (f"{name}\n{FENCE_OPEN}\n" if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        return _section("\n".join(
            f"{CALL_BEGIN}function{SEP}{c.name}\n{FENCE_OPEN}\n{c.arguments}\n{FENCE_CLOSE}{CALL_END}" for c in calls))
