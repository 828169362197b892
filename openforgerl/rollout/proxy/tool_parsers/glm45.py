"""GLM-4.5 / 4.6 / 4.7 tool calls: the function's name, then key and value pairs, in a ``<tool_call>`` block.

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    </tool_call>

(GLM-4.7 may write the first ``<arg_key>`` right after the name, with no newline.) A value is the text between
its tags, less surrounding whitespace, as vLLM's ``glm45`` parser reads it. Its JSON type: a parameter the call's
tools type as a string stays the text; any other (a number, a list, or a parameter no schema describes) takes
the JSON value the text spells, if it spells one (``True``/``False``/``None`` too), else stays text. The model's
template writes strings as they are and everything else as JSON, so the harness gets what the model meant.

Key invariants, as for Hermes: text that is not a well-formed call stays text, shown to the harness as the model
wrote it; a stream and the whole turn give the same text and calls.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from openforgerl.rollout.proxy.conversation import ToolCall
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream
from openforgerl.rollout.proxy.tool_parsers.hermes import CLOSE, OPEN, HermesStream
from openforgerl.rollout.proxy.tool_parsers.qwen3_coder import (
    NOT_JSON,
    STRING_TYPES,
    _types,
    properties,
    spelled,
    typed_call,
)

KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def typed(value: str, schema: Any) -> Any:
    """``value`` as the JSON value it spells, unless its schema types it as a string (or it spells none)."""
    if _types(schema) & STRING_TYPES:
        return value
    parsed = spelled(value)
    return value if parsed is NOT_JSON else parsed


def _pairs(inner: str) -> dict[str, str] | None:
    """The values' texts by key, in order; None when anything but key-value pairs and blank space is there."""
    values: dict[str, str] = {}
    at, end = 0, len(inner.rstrip())
    while at < end:
        pair = PAIR.match(inner, at)
        key = pair[1].strip() if pair else ""
        if pair is None or not key or "<" in key:
            return None
        values[key] = pair[2].strip()
        at = pair.end()
    return values


def parse_body(body: str, schemas: dict[str, dict[str, Any]]) -> ToolCall | None:
    """One call from the text between ``<tool_call>`` and ``</tool_call>`` (stripped); None if malformed."""
    name_end = min((at for at in (body.find("\n"), body.find(KEY_OPEN)) if at >= 0), default=len(body))
    name = body[:name_end].strip()
    if not name or "<" in name or any(c in name for c in "{}\"' "):  # a JSON body (Hermes'), or prose
        return None
    values = _pairs(body[name_end:])
    return None if values is None else typed_call(name, values, schemas, typed)


class Glm45ToolParser(ToolParser):
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return HermesStream(functools.partial(parse_body, schemas=properties(tools)))

    def forced_prefix(self, name: str | None) -> str:
        return OPEN + (f"{name}\n" if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        blocks = []
        for call in calls:
            arguments = call.arguments_object()
            lines = [f"{OPEN}{call.name}"]
            for key, value in (arguments.items() if isinstance(arguments, dict) else ()):
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                lines += [f"{KEY_OPEN}{key}{KEY_CLOSE}", f"{VALUE_OPEN}{text}{VALUE_CLOSE}"]
            blocks.append("\n".join(lines) + f"\n{CLOSE}")
        return "\n".join(blocks)
