"""Qwen3-Coder tool calls: XML-like blocks whose parameters are untyped text.

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

A value is whatever the model wrote between its tags, less the newline after the opening tag and the one
before the closing tag. Its JSON type comes from the call's tools: a parameter the schema types as a string
(or does not describe) stays the text as written; one typed integer, number, boolean, object, array or null
takes the JSON value the text spells (``True``/``False`` too), if it spells one of those types, else stays
text. Numbers keep the form written (``3.0`` stays a float), so the template writes them back as sampled.

Key invariants, as for Hermes: text that is not a well-formed call stays text, shown to the harness as the model
wrote it; a stream and the whole turn give the same text and calls. A parameter left unclosed (the model
skipped its ``</parameter>``) ends where a line opens the next parameter, or where the function closes. A call
written without its wrapper (a bare ``<function=NAME>...</function>``, as small models do) is a call too, as
vLLM's own ``qwen3_coder`` parser reads it; one cut off before its ``</function>`` stays text.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

from openforgerl.rollout.proxy.conversation import ToolCall, nesting_exceeds
from openforgerl.rollout.proxy.tool_parser import ToolParser, ToolStream, new_call_id
from openforgerl.rollout.proxy.tool_parsers.hermes import CLOSE, OPEN, Block, HermesStream

FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER_OPEN, PARAMETER_CLOSE = "<parameter=", "</parameter>"
BLOCKS = (Block(OPEN, CLOSE), Block(FUNCTION_OPEN, FUNCTION_CLOSE, whole=True))
"""A call in its ``<tool_call>`` wrapper, or a bare ``<function=...>...</function>`` (the model skipped the wrapper:
vLLM's own qwen3_coder parser reads it as a call too)."""

STRING_TYPES = frozenset({"string", "str", "text", "varchar", "char", "enum"})
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,), "int": (int,), "number": (int, float), "float": (float,), "boolean": (bool,),
    "bool": (bool,), "object": (dict,), "dict": (dict,), "array": (list,), "list": (list,), "null": (type(None),)}


def properties(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Each offered function's parameter schemas by name (what is not a well-formed schema is left out)."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        props = parameters.get("properties") if isinstance(parameters, dict) else None
        found[function["name"]] = props if isinstance(props, dict) else {}
    return found


def _types(schema: Any, depth: int = 4) -> set[str]:
    """The type names a parameter's schema allows (``type``, a list of them, or ``anyOf``/``oneOf`` branches, a
    few levels deep: the schema is the harness's, any shape)."""
    if not isinstance(schema, dict) or depth == 0:
        return set()
    kinds = schema.get("type")
    if isinstance(kinds, str):
        names = {kinds}
    else:
        names = {k for k in kinds if isinstance(k, str)} if isinstance(kinds, list) else set()
    if "enum" in schema and not names:
        names.add("enum")
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            names |= _types(branch, depth - 1)
    return {name.lower() for name in names}


NOT_JSON = object()
"""What ``spelled`` gives for a text that spells no JSON value."""
PYTHON_WORDS = {"True": "true", "False": "false", "None": "null"}


def spelled(text: str) -> Any:
    """The JSON value ``text`` spells (Python's ``True``/``False``/``None`` too), else ``NOT_JSON``; NaN and the
    infinities are not JSON a harness reads."""
    try:
        parsed = json.loads(PYTHON_WORDS.get(text, text))
    except (ValueError, RecursionError):
        return NOT_JSON
    return NOT_JSON if isinstance(parsed, float) and not math.isfinite(parsed) else parsed


def typed(value: str, schema: Any) -> Any:
    """``value`` as the JSON value its schema's type asks for, when the text spells one; else the text."""
    kinds = _types(schema)
    if not kinds or kinds & STRING_TYPES:
        return value
    parsed = spelled(value.strip())
    allowed = tuple(t for kind in kinds for t in JSON_TYPES.get(kind, ()))
    if parsed is NOT_JSON or isinstance(parsed, bool) and bool not in allowed:  # (bool is an int to isinstance)
        return value
    return parsed if isinstance(parsed, allowed) else value


def _parameters(inner: str) -> dict[str, str] | None:
    """The parameters' texts by name, in order; None when anything but parameters and blank space is there."""
    values: dict[str, str] = {}
    at = 0
    while True:
        start = inner.find(PARAMETER_OPEN, at)
        if start < 0:
            return None if inner[at:].strip() else values
        name_end = inner.find(">", start)
        name = inner[start + len(PARAMETER_OPEN):name_end] if name_end >= 0 else ""
        if inner[at:start].strip() or not name.strip() or "\n" in name or "<" in name:
            return None
        close = inner.find(PARAMETER_CLOSE, name_end)
        following = inner.find("\n" + PARAMETER_OPEN, name_end)
        if close >= 0 and not 0 <= following < close:
            end, at = close, close + len(PARAMETER_CLOSE)
        else:  # left open: up to the next parameter's line
            end = at = following + 1 if following >= 0 else len(inner)
        value = inner[name_end + 1:end]
        value = value[1:] if value.startswith("\n") else value
        values[name.strip()] = value[:-1] if value.endswith("\n") else value


def parse_body(body: str, schemas: dict[str, dict[str, Any]]) -> ToolCall | None:
    """One call from the text between ``<tool_call>`` and ``</tool_call>`` (stripped); None if malformed."""
    if not body.startswith(FUNCTION_OPEN) or not body.endswith(FUNCTION_CLOSE):
        return None
    name_end = body.find(">")
    name = body[len(FUNCTION_OPEN):name_end].strip()
    if not name or "\n" in name or "<" in name:
        return None
    values = _parameters(body[name_end + 1:len(body) - len(FUNCTION_CLOSE)])
    return None if values is None else typed_call(name, values, schemas)


def typed_call(name: str, values: dict[str, str], schemas: dict[str, dict[str, Any]],
               typing: Callable[[str, Any], Any] = typed) -> ToolCall | None:
    """The call of ``name`` with ``values`` typed by ``typing`` per the function's parameter schemas; None when
    they nest deeper than the proxy writes back out."""
    schema = schemas.get(name, {})
    arguments = {key: typing(value, schema.get(key)) for key, value in values.items()}
    if nesting_exceeds(arguments):
        return None
    return ToolCall(id=new_call_id(), name=name, arguments=json.dumps(arguments, ensure_ascii=False))


def value_text(value: Any) -> str:
    """A parameter's value as the model writes it: strings as they are, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class Qwen3CoderToolParser(ToolParser):
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        return HermesStream(functools.partial(parse_body, schemas=properties(tools)), BLOCKS)

    def forced_prefix(self, name: str | None) -> str:
        return f"{OPEN}\n" + (f"{FUNCTION_OPEN}{name}>\n" if name else "")

    def format(self, calls: list[ToolCall]) -> str:
        blocks = []
        for call in calls:
            arguments = call.arguments_object()
            lines = [OPEN, f"{FUNCTION_OPEN}{call.name}>"]
            for key, value in (arguments.items() if isinstance(arguments, dict) else ()):
                lines += [f"{PARAMETER_OPEN}{key}>", value_text(value), PARAMETER_CLOSE]
            blocks.append("\n".join([*lines, FUNCTION_CLOSE, CLOSE]))
        return "\n".join(blocks)
