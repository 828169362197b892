"""Hermes / Qwen tool calls: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

Key invariant: text that is not a well-formed call stays text — a malformed call is shown to
the harness as what the model wrote, never dropped. Arguments nested deeper than the proxy can write
back out as JSON (a degenerate policy can sample thousands of brackets) count as malformed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openforgerl.rollout.proxy.conversation import Event, TextDelta, ToolCall, ToolCallDone, nesting_exceeds
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream, new_call_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def parse_call(body: str) -> ToolCall | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or nesting_exceeds(data):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=new_call_id(), name=data["name"], arguments=text)


def arguments_text(arguments: Any) -> str | None:
    """A call's arguments as the JSON text the harness gets, from an object or the text of one; None when they are
    not an object, or are nested deeper than the proxy writes back out (a malformed call)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict) or nesting_exceeds(arguments):
        return None
    return json.dumps(arguments, ensure_ascii=False)


def partial_marker_len(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``. Only a suffix that
    starts with the marker's first character can be one: those are looked at (most texts have none)."""
    tail = text[max(len(text) - len(marker) + 1, 0):]
    at = tail.find(marker[0])
    while at >= 0:
        if marker.startswith(tail[at:]):
            return len(tail) - at
        at = tail.find(marker[0], at + 1)
    return 0


@dataclass(frozen=True)
class Block:
    """Where a call's text starts and ends; ``whole``: the parser reads the markers too (a call written without a
    wrapper, e.g. Qwen3-Coder's bare ``<function=...>``), else only what is between them."""

    open: str
    close: str
    whole: bool = False


WRAPPED = (Block(OPEN, CLOSE),)


class HermesStream(ToolStream):
    """Calls in ``blocks`` (by default between ``<tool_call>`` and ``</tool_call>``), each read by ``parse``
    (Hermes: the body as JSON); a call it cannot read stays text, as written."""

    def __init__(self, parse: Callable[[str], ToolCall | None] = parse_call,
                 blocks: tuple[Block, ...] = WRAPPED) -> None:
        self._parse = parse
        self._blocks = blocks
        self._buffer = ""
        self._in_call: Block | None = None
        self._pending_space = ""  # trailing whitespace, emitted only if more text follows
        self._started = False

    def _text(self, text: str) -> list[Event]:
        if not self._started:
            text = text.lstrip()
        if not text:
            return []
        body = text.rstrip()
        if not body:
            self._pending_space += text
            return []
        out = self._pending_space + body
        self._pending_space = text[len(body):]
        self._started = True
        return [TextDelta(out)]

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while True:
            block = self._in_call
            if block is not None:
                end = self._buffer.find(block.close)
                if end < 0:
                    return events
                events += self._call(block, self._buffer[:end])
                self._buffer, self._in_call = self._buffer[end + len(block.close):], None
                continue
            start, block = self._first_open()
            if block is None:
                keep = partial_marker_len(self._buffer, self._blocks[0].open) if len(self._blocks) == 1 else \
                    max(partial_marker_len(self._buffer, b.open) for b in self._blocks)
                emit, self._buffer = self._buffer[: len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
                return events + self._text(emit)
            events += self._text(self._buffer[:start])  # the space before it waits: a call that is not read is
            self._buffer, self._in_call = self._buffer[start + len(block.open):], block  # text as written

    def _first_open(self) -> tuple[int, Block | None]:
        """Where the first call in the buffer starts, and its kind."""
        if len(self._blocks) == 1:  # (Hermes: one find, as before there were kinds)
            at = self._buffer.find(self._blocks[0].open)
            return at, self._blocks[0] if at >= 0 else None
        first, kind = -1, None
        for block in self._blocks:
            at = self._buffer.find(block.open)
            if at >= 0 and (kind is None or at < first):
                first, kind = at, block
        return first, kind

    def _call(self, block: Block, body: str) -> list[Event]:
        call = self._parse((block.open + body + block.close).strip() if block.whole else body.strip())
        if call is None:
            return self._text(block.open + body + block.close)
        self._started, self._pending_space = True, ""
        return [ToolCallDone(call)]

    def finish(self) -> list[Event]:
        rest, self._buffer = self._buffer, ""
        block, self._in_call = self._in_call, None
        if block is not None:  # cut off after the body, before the closing marker
            call = None if block.whole else self._parse(rest.strip())  # a bare call must be whole to count
            if call is None:
                return self._text(block.open + rest)
            self._pending_space = ""
            return [ToolCallDone(call)]
        return self._text(rest)


class HermesToolParser(ToolParser):
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return HermesStream()

    def forced_prefix(self, name: str | None) -> str:
        return f"{OPEN}\n" + (f'{{"name": {json.dumps(name)}, "arguments": ' if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f'{OPEN}\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n{CLOSE}' for c in calls)
