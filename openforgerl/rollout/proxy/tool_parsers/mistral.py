"""Mistral's tool calls: everything after a ``[TOOL_CALLS]`` marker (a special token of Mistral's tokenizers) to the
end of the answer.

    list form (Mistral 7B v0.3, Small 3.1, vLLM's mistral templates):
        [TOOL_CALLS] [{"name": NAME, "arguments": {...}, "id": "a1b2c3d4e"}, ...]
    name form (tokenizers from version 11: Small 3.2, Devstral, Magistral):
        [TOOL_CALLS]NAME[ARGS]{...}[TOOL_CALLS]NAME[ARGS]{...}     (``NAME[CALL_ID]ID[ARGS]`` too)

The markers are ``markers`` of the parser: the proxy keeps them in the text this parser reads. A call's id as the
model wrote it (Mistral's templates write the last 9 characters of each call's id back into the history) ends the id
the harness gets, so the history renders back as sampled. What follows the marker counts only when all of it is
calls (a name, a JSON object of arguments); else it stays text, as written. Key invariants, as for Hermes: text that
is not well-formed calls stays text; a stream and the whole turn give the same text and calls.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from openforgerl.rollout.proxy.conversation import Event, ToolCall, ToolCallDone
from openforgerl.rollout.proxy.tool_parser import CALL_ID_PREFIX, ToolParser, ToolStream, new_call_id
from openforgerl.rollout.proxy.tool_parsers.hermes import Block, HermesStream, arguments_text, partial_marker_len

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
MARKERS = (TOOL_CALLS, ARGS, CALL_ID)
ID_LENGTH = 9
"""Mistral's templates write a call's id as its last 9 characters (and refuse shorter ones)."""


def call_id(written: Any) -> str:
    """The id the harness gets for a call the model wrote with id ``written``: new, ending in it when it is one of
    Mistral's (9 letters and digits), so the template writes back what was sampled."""
    if isinstance(written, str) and len(written) == ID_LENGTH and written.isascii() and written.isalnum():
        return CALL_ID_PREFIX + secrets.token_hex(8) + written
    return new_call_id()


def _call(name: Any, arguments: Any, written_id: Any = None) -> ToolCall | None:
    if not isinstance(name, str):
        return None
    name, text = name.strip(), arguments_text(arguments)
    if not name or any(c.isspace() or c in "[]{}<>\"" for c in name) or text is None:
        return None
    return ToolCall(id=call_id(written_id), name=name, arguments=text)


def read_calls(rest: str) -> list[ToolCall] | None:
    """The calls written after the first ``[TOOL_CALLS]``; None unless all of it is calls."""
    body = rest.strip()
    calls: list[ToolCall | None] = []
    if body.startswith("["):  # the list form
        try:
            items = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            return None
        calls = [_call(item.get("name"), item.get("arguments", {}), item.get("id")) for item in items]
    else:  # the name form: each call after its own marker
        for chunk in body.split(TOOL_CALLS):
            head, sep, arguments = chunk.partition(ARGS)
            if not sep:
                return None
            name, has_id, written_id = head.partition(CALL_ID)
            calls.append(_call(name, arguments, written_id.strip() if has_id else None))
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


class MistralStream(HermesStream):
    """Text until the first ``[TOOL_CALLS]``; from there to the end of the answer, calls."""

    def __init__(self) -> None:
        super().__init__(blocks=(Block(TOOL_CALLS, ""),))

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        if self._in_call is not None:
            return []  # calls run to the end of the answer
        at = self._buffer.find(TOOL_CALLS)
        if at < 0:
            keep = partial_marker_len(self._buffer, TOOL_CALLS)
            emit, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
            return self._text(emit)
        events = self._text(self._buffer[:at])  # the space before it waits: calls that are not read are text
        self._buffer, self._in_call = self._buffer[at + len(TOOL_CALLS):], self._blocks[0]
        return events

    def finish(self) -> list[Event]:
        rest, self._buffer = self._buffer, ""
        if self._in_call is None:
            return self._text(rest)
        self._in_call = None
        calls = read_calls(rest)
        if calls is None:
            return self._text(TOOL_CALLS + rest)
        self._started, self._pending_space = True, ""
        return [ToolCallDone(call) for call in calls]


class MistralToolParser(ToolParser):
    markers = MARKERS

    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return MistralStream()

    def forced_prefix(self, name: str | None) -> str:
        return f"{TOOL_CALLS} [" + (f'{{"name": {json.dumps(name)}, "arguments": ' if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        """The list form, each call with an id of Mistral's (the end of ``id``, or one made from the call)."""
        if not calls:
            return ""
        items = []
        for i, c in enumerate(calls):
            tail = "".join(ch for ch in c.id if ch.isascii() and ch.isalnum())[-ID_LENGTH:]
            if len(tail) < ID_LENGTH:
                tail = hashlib.sha1(f"{i}{c.name}{c.arguments}".encode()).hexdigest()[:ID_LENGTH]
            items.append(f'{{"name": {json.dumps(c.name)}, "arguments": {c.arguments}, "id": "{tail}"}}')
        return f"{TOOL_CALLS} [" + ", ".join(items) + "]"
