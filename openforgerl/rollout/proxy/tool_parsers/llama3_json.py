"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: the whole answer is one call object, or several separated by ``;``.

    {"name": "NAME", "parameters": {...}}

optionally after ``<|python_tag|>`` (the template's custom-tool format may or may not make the model write it).
As vLLM's ``llama3_json`` parser reads it: an answer that begins with a call object is calls only when all of it is
call objects (``parameters``, or ``arguments``, an object); anything else is text. So an answer that begins like a
call is held back until it ends (its text cannot be told from a call before), and any other is streamed as written.

Key invariants, as for Hermes: text that is not a well-formed call stays text, shown to the harness as the model
wrote it; a stream and the whole turn give the same text and calls.
"""

from __future__ import annotations

import json
from typing import Any

from openforgerl.rollout.proxy.conversation import Event, TextDelta, ToolCall, ToolCallDone, nesting_exceeds
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream, new_call_id

PYTHON_TAG = "<|python_tag|>"
SEPARATOR = ";"
_DECODER = json.JSONDecoder()


def parse_calls(text: str) -> list[ToolCall] | None:
    """The calls ``text`` is made of, in order; None unless all of it (less blank space and one leading
    ``<|python_tag|>``) is call objects separated by ``;``."""
    body = text.strip().removeprefix(PYTHON_TAG).lstrip()
    calls: list[ToolCall] = []
    at = 0
    while at < len(body):
        try:
            data, end = _DECODER.raw_decode(body, at)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"] or \
                nesting_exceeds(data):
            return None
        arguments = data.get("parameters", data.get("arguments", {}))
        if not isinstance(arguments, dict):
            return None
        calls.append(ToolCall(id=new_call_id(), name=data["name"],
                              arguments=json.dumps(arguments, ensure_ascii=False)))
        rest = body[end:].lstrip()
        if rest.startswith(SEPARATOR):
            rest = rest[len(SEPARATOR):].lstrip()
            if not rest:
                return None  # a separator with no call after it
        elif rest:
            return None
        at = len(body) - len(rest)
    return calls or None


def _may_be_call(text: str) -> bool:
    """Whether an answer beginning with ``text`` (not blank) may be calls: it starts with ``{`` or with (a part
    of) the python tag."""
    head = text.lstrip()
    return head.startswith("{") or head.startswith(PYTHON_TAG) or PYTHON_TAG.startswith(head)


class Llama3JsonStream(ToolStream):
    def __init__(self) -> None:
        self._held = ""
        self._text_only = False

    def feed(self, text: str) -> list[Event]:
        if self._text_only:
            return [TextDelta(text)] if text else []
        self._held += text
        if not self._held.strip() or _may_be_call(self._held):
            return []
        self._text_only = True
        held, self._held = self._held, ""
        return [TextDelta(held)]

    def finish(self) -> list[Event]:
        held, self._held = self._held, ""
        if self._text_only or not held:
            return []
        calls = parse_calls(held) if held.strip() else None
        if calls is None:
            return [TextDelta(held)]
        return [ToolCallDone(call) for call in calls]


class Llama3JsonToolParser(ToolParser):
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return Llama3JsonStream()

    def forced_prefix(self, name: str | None) -> str:
        return '{"name": ' + (f'{json.dumps(name)}, "parameters": ' if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        objects = []
        for call in calls:
            arguments = call.arguments_object()
            text = json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, dict) else call.arguments
            objects.append(f'{{"name": {json.dumps(call.name, ensure_ascii=False)}, "parameters": {text}}}')
        return "; ".join(objects)
