"""Hermes / Qwen tool calls: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

Key invariant: text that is not a well-formed call stays text — a malformed call is shown to
the harness as what the model wrote, never dropped. Arguments nested deeper than the proxy can write
back out as JSON (a degenerate policy can sample thousands of brackets) count as malformed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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


class HermesStream(ToolStream):
    """Calls between ``<tool_call>`` and ``</tool_call>``, each body read by ``parse`` (Hermes: JSON); a body it
    cannot read stays text."""

    def __init__(self, parse: Callable[[str], ToolCall | None] = parse_call) -> None:
        self._parse = parse
        self._buffer = ""
        self._in_call = False
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
            if self._in_call:
                end = self._buffer.find(CLOSE)
                if end < 0:
                    return events
                events += self._call(self._buffer[:end])
                self._buffer, self._in_call = self._buffer[end + len(CLOSE):], False
                continue
            start = self._buffer.find(OPEN)
            if start < 0:
                keep = partial_marker_len(self._buffer, OPEN)
                emit, self._buffer = self._buffer[: len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
                return events + self._text(emit)
            events += self._text(self._buffer[:start])
            self._pending_space = ""
            self._buffer, self._in_call = self._buffer[start + len(OPEN):], True

    def _call(self, body: str) -> list[Event]:
        call = self._parse(body.strip())
        if call is None:
            return self._text(OPEN + body + CLOSE)
        self._started = True
        return [ToolCallDone(call)]

    def finish(self) -> list[Event]:
        rest, self._buffer = self._buffer, ""
        if self._in_call:
            self._in_call = False
            call = self._parse(rest.strip())  # cut off after the body, before the closing tag
            return [ToolCallDone(call)] if call else self._text(OPEN + rest)
        return self._text(rest)


class HermesToolParser(ToolParser):
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return HermesStream()

    def forced_prefix(self, name: str | None) -> str:
        return f"{OPEN}\n" + (f'{{"name": {json.dumps(name)}, "arguments": ' if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f'{OPEN}\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}}}\n{CLOSE}' for c in calls)
