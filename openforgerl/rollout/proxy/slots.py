"""A run of messages rendered as its *shape*: the texts it brings (contents, tool-call arguments and ids) as slots.

Real tool outputs and answers are new text on every call, so the template's per-run text cache never serves them:
each call rendered its new runs through Jinja (~45 us a run here), and under many live rollouts, once the cache
had turned over, the old runs of every history again. But most templates write such a text out whole, as it is:
then a run's text is the text of its shape (the same run with a placeholder for each text) with the placeholders
replaced, and shapes repeat (a tool result, an answer, an answer with a call to a given function).

Key invariant: a shape's pieces are used only when the template, rendering it, did nothing with a placeholder but
write it out (concatenated, formatted without a spec, tested for being a non-empty string) or test whether it holds
a given text (``'</think>' in content``: a *guard*, the pieces then hold only for texts that give the same answer):
the placeholders are ``Slot`` strings that note any other use (a comparison, ``in`` of a non-literal or on a string
made from one, a method such as ``strip`` or ``split``, ``len``, indexing, iteration) while the shape renders, and
a placeholder that comes out changed (escaped, JSON-quoted) is not found whole; a second render with other texts
(and, for an arguments object's lists, objects and numbers, other values of their type) must give the pieces filled
with those, the guards answered alike. Otherwise the shape is marked as not slottable and its runs render through
the template. A use the strings cannot see (one on a string joined from them by ``~``)
is what the per-template check on sample texts (``SAMPLES``: edge whitespace, the tags templates branch on,
quotes, braces) is there to catch.

An arguments object (the canonical form of every tool call) is written by templates as JSON: its strings are
slots holding their JSON text (``json_text``), its other values slots holding ``json.dumps`` of them, in place of
the quoted placeholder; the second render shows a template that writes them otherwise.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

MARK = "\ue000"
"""Starts every placeholder; a run whose texts hold it is rendered through the template."""
_END = "\ue001"
_PLACEHOLDER = re.compile("\ue000(?:\n<&\"'\\\\(\\d+)|j(\\d+)|v([ldif])(\\d+))\ue001")
"""A placeholder: private-use marks around its index and, for a text written out as it is, characters any escaping
changes (newline, ``<&"'\\``); for a string inside an arguments object (written as JSON), a ``j`` instead; for
another value there (written as JSON: a list, an object, an integer, a float), ``v`` and its type's letter."""
TEXT, JSON_STRING = "text", "json"
_TYPES = {list: "l", dict: "d", int: "i", float: "f"}


def placeholder(index: int, kind: str = TEXT) -> str:
    if kind == TEXT:
        return f"{MARK}\n<&\"'\\{index}{_END}"
    return f"{MARK}j{index}{_END}" if kind == JSON_STRING else f"{MARK}v{kind}{index}{_END}"


def _index_and_kind(found: re.Match[str]) -> tuple[int, str]:
    if found.group(1):
        return int(found.group(1)), TEXT
    return (int(found.group(2)), JSON_STRING) if found.group(2) else (int(found.group(4)), found.group(3))


def json_text(text: str) -> str:
    """``text`` as a JSON string writes it, without the quotes (what the texts of ``in_json`` slots hold)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


_noted = threading.local()
"""While this thread renders a shape: ``uses``, the uses of placeholders seen (None when it renders none);
``slots``, the index of each text slot's ``Slot`` by its ``id``; ``guards``, the ``in`` tests on those."""
_WRITTEN = frozenset({"__str__", "__format__", "__add__", "__radd__", "__bool__", "__getnewargs__", "__new__",
                      "__init__", "__getattribute__", "__setattr__", "__delattr__", "__init_subclass__",
                      "__subclasshook__", "__reduce__", "__reduce_ex__", "__sizeof__", "__dir__", "__class__",
                      "__doc__", "__getstate__"})
"""What writing a text out uses (and what Python itself calls on any object): everything else of ``str`` is noted."""


def _note(use: str) -> None:
    seen = getattr(_noted, "uses", None)
    if seen is not None:
        seen.append(use)


class Slot(str):
    """A placeholder that notes every use of it but writing it out (``_WRITTEN``). Concatenating keeps the note
    taking: ``content + '\\n'`` is a ``Slot`` too, so a ``strip`` of it is seen."""

    __slots__ = ()

    def __str__(self) -> str:
        return self

    def __format__(self, spec: str) -> str:
        if spec:
            _note("__format__")
        return self

    def __add__(self, other: str) -> Slot:
        return Slot(str.__add__(self, other))

    def __radd__(self, other: str) -> Slot:
        return Slot(str.__add__(other, self))

    def __bool__(self) -> bool:  # only non-empty texts get placeholders
        return True

    def __contains__(self, item: str) -> bool:  # type: ignore[override]
        found = str.__contains__(self, item)
        index = (getattr(_noted, "slots", None) or {}).get(id(self))
        if index is not None and type(item) is str and item and MARK not in item and _END not in item:
            _noted.guards.append((index, item, found))  # a text slot tested for a literal: a guard
        else:
            _note("__contains__")
        return found


def _noting(name: str) -> Callable[..., Any]:
    own = getattr(str, name)

    def noted(self: Slot, *args: Any, **kwargs: Any) -> Any:
        _note(name)
        return own(self, *args, **kwargs)
    return noted


for _name in dir(str):
    if _name not in _WRITTEN and _name != "__contains__" and callable(getattr(str, _name)):
        setattr(Slot, _name, _noting(_name))


class Pieces(tuple[str | int, ...]):
    """A shape's text as literal pieces and placeholder indexes, in order. ``guards``: for each ``text in slot``
    the template tested, ``(index, text, found)``: a run whose texts answer otherwise renders through Jinja."""

    guards: tuple[tuple[int, str, bool], ...] = ()


def holds(parts: tuple[str | int, ...], texts: list[str]) -> bool:
    """Whether ``texts`` answer each guard of ``parts`` as the placeholders did (so its pieces hold for them)."""
    return all((needle in texts[index]) == found for index, needle, found in getattr(parts, "guards", ()))


SHORT = 64
"""Other values a shape may hold (a role, a function's name): longer ones would make a shape per call."""


def shape(run: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]] | None:
    """``run`` with each non-empty text (content, tool-call arguments and ids, tool_call_id) and each value of an
    arguments object but true, false and null a placeholder, and the texts in placeholder order (an arguments
    object's values as JSON writes them); None when there is nothing to put in a slot, a text holds ``MARK``, or
    the run holds other values that are not short (reasoning text...): its shape would be new on every call, and
    cost two renders instead of one."""
    texts: list[str] = []

    def slot(text: Any, in_json: bool = False) -> Any:
        if in_json and type(text) in _TYPES and not text:  # 0, [], {}: a template may test a value's truth, and a
            return text  # placeholder is true (so is each second value): such a value stays in the shape
        if in_json and type(text) in _TYPES:  # a value an arguments object holds, as JSON writes it
            try:
                written = json.dumps(text, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError):
                raise _Unslottable from None
            if MARK in written:
                raise _Unslottable
            texts.append(written)
            return placeholder(len(texts) - 1, _TYPES[type(text)])
        if not isinstance(text, str) or not text:
            return _short(text) if not in_json or text is None or text == "" or isinstance(text, bool) else _no()
        if MARK in text:
            raise _Unslottable
        texts.append(json_text(text) if in_json else text)
        return placeholder(len(texts) - 1, JSON_STRING if in_json else TEXT)
    try:
        shaped = []
        for message in run:
            message = {key: slot(value) if key in ("content", "tool_call_id") else
                       [_call_shape(call, slot) for call in value] if key == "tool_calls" and isinstance(value, list)
                       else _short(value) for key, value in message.items()}
            shaped.append(message)
    except _Unslottable:
        return None
    return (shaped, texts) if texts else None


def _short(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)) or \
            (isinstance(value, str) and len(value) <= SHORT and MARK not in value):
        return value
    raise _Unslottable


def _no() -> Any:
    raise _Unslottable


def _call_shape(call: Any, slot: Callable[..., Any]) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise _Unslottable
    return {key: slot(value) if key == "id" else
            {k: _arguments_shape(v, slot) if k == "arguments" else _short(v) for k, v in value.items()}
            if key == "function" else _short(value) for key, value in call.items()}


def _arguments_shape(arguments: Any, slot: Callable[..., Any]) -> Any:
    if not isinstance(arguments, dict):
        return slot(arguments)  # a string (or what ``slot`` refuses)
    return {_short(key) if isinstance(key, str) else _no(): slot(value, True) for key, value in arguments.items()}


class _Unslottable(Exception):
    pass


def _mapped(value: Any, to: Callable[[int, str], Any]) -> Any:
    """The shape with each placeholder replaced by ``to(index, kind)``."""
    if isinstance(value, dict):
        return {k: _mapped(v, to) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped(v, to) for v in value]
    found = _PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return to(*_index_and_kind(found)) if found else value


def pieces(shaped: list[dict[str, Any]], render: Callable[[list[dict[str, Any]]], str]) -> tuple[str | int, ...]:
    """The text ``render`` gives for ``shaped`` as literal pieces and placeholder indexes, in order; () when the
    template used a placeholder for more than writing it out, changed one (escaped it, dropped a text it did write),
    or failed on the shape. Checked by rendering the shape again with other texts in the slots: the pieces
    filled with those must give that render's text."""
    kinds: dict[int, str] = {}
    ids: dict[int, int] = {}

    def as_slot(index: int, kind: str) -> Slot:  # the placeholder, noting its uses (and its kind)
        kinds[index] = kind
        return _text_slot(ids, index, placeholder(index, kind), kind)
    first, guards = _render_noting(_mapped(shaped, as_slot), render, ids)
    if first is None:
        return ()
    split: list[str | int] = []
    at = 0
    for found in _PLACEHOLDER.finditer(first):
        index, kind = _index_and_kind(found)
        start, end = found.start(), found.end()
        if kind not in (TEXT, JSON_STRING):  # a value's placeholder is a string: JSON quotes it, the value not
            if first[start - 1:start] != '"' or first[end:end + 1] != '"':
                return ()
            start, end = start - 1, end + 1
        split += [first[at:start], index]
        at = end
    parts = (*split, first[at:])
    if any(MARK in part or _END in part for part in parts[::2]):  # type: ignore[operator]
        return ()  # a placeholder came out changed
    others: list[Any] = [_OTHER_VALUES.get(kinds[i]) or _other(i) for i in range(len(kinds))]
    ids.clear()
    second, other_guards = _render_noting(_mapped(shaped, lambda i, kind: _text_slot(ids, i, others[i], kind)
                                                  if kind in (TEXT, JSON_STRING) else others[i]), render, ids)
    filled = [other if kinds[i] == TEXT else json_text(other) if kinds[i] == JSON_STRING else
              json.dumps(other, ensure_ascii=False) for i, other in enumerate(others)]
    if second is None or second != fill(parts, filled) or set(other_guards) != set(guards):
        return ()  # (the other texts must also answer the guards as the placeholders did: the same branches)
    kept = Pieces(parts)
    kept.guards = tuple(sorted(set(guards)))
    return kept


def _text_slot(ids: dict[int, int], index: int, text: str, kind: str) -> Slot:
    """``text`` as the ``Slot`` of slot ``index``; a text slot's (not an argument's) may be tested with ``in``."""
    slot = Slot(text)
    if kind == TEXT:
        ids[id(slot)] = index
    return slot


def _render_noting(run: Any, render: Callable[[list[dict[str, Any]]], str],
                   ids: dict[int, int]) -> tuple[str | None, list[tuple[int, str, bool]]]:
    """``render`` of a run whose texts are ``Slot`` strings (``ids``: the text slots' indexes by ``id``) and the
    guards it tested; None for the text when it noted another use of one or failed."""
    _noted.uses, _noted.slots, _noted.guards = [], ids, []
    try:
        text = render(run)
        used, guards = _noted.uses, _noted.guards
    except Exception:  # noqa: BLE001  (a template that cannot render the placeholders: the run renders as is)
        return None, []
    finally:
        _noted.uses = _noted.slots = _noted.guards = None
    return (None, []) if used else (str.__str__(text), guards)


def _other(index: int) -> str:
    """A second text for slot ``index``: of another length, and changed by any escaping (as HTML, as JSON, as
    ASCII JSON) too."""
    return f"\ue002\t<>&\"'\\/\x01\u00e9\u2028 {index} {index}\ue003"


_OTHER_VALUES: dict[str, Any] = {
    "l": ["\ue002\"\u00e9\n", 12, [True, None], {"z": 1, "a": 0.5}],
    "d": {"z": "\"\u00e9\n", "a": [1, 2], "m": {"k": None}}, "i": 1234567, "f": 0.25}
"""Second values for the slots of an arguments object's other values, by type: real ones, so a template that writes
a list or a number otherwise than a string (or JSON otherwise than ``json.dumps``) shows it in the second render."""


def fill(parts: tuple[str | int, ...], texts: list[str]) -> str:
    """The run's text: ``parts`` with each placeholder's own text in its place."""
    return "".join([texts[part] if type(part) is int else part for part in parts])  # type: ignore[misc]


SAMPLES = [" leading", "trailing \n", "\n\nboth\t ", "</think>after", "<think>why</think>\nso",
           "<tool_response>\nr\n</tool_response>", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
           "a \"quote\" 'and' \\ back", "{{ x }} {% raw %} {#", "UPPER lower Title", "d\u00e9j\u00e0 \U0001f600 \u6f22",
           "user", "assistant", "tool", "system", "<|im_end|>", "x" * 300, "\n", " "]
"""Texts each run of the per-template check brings: a template may branch on or change any of them."""


def sample_runs() -> list[list[dict[str, Any]]]:
    """Runs of every role with ``SAMPLES`` as contents, tool-call arguments and ids: the texts of a template that
    renders a sample through its shape must equal the texts it renders for the sample itself."""
    runs: list[list[dict[str, Any]]] = []
    for i, text in enumerate(SAMPLES):
        other = SAMPLES[-1 - i]
        runs += [[{"role": "user", "content": text}], [{"role": "assistant", "content": text}],
                 [{"role": "system", "content": text}],
                 [{"role": "tool", "tool_call_id": other, "content": text},
                  {"role": "tool", "tool_call_id": "call_2", "content": other}],
                 [{"role": "assistant", "content": other, "tool_calls": [
                     {"id": text, "type": "function", "function": {"name": "shell", "arguments": text}},
                     {"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": '{"p": 1}'}},
                     {"id": "call_3", "type": "function", "function": {"name": "write", "arguments": {
                         "path": text, "content": other, "empty": "", "flag": True}}},
                     {"id": "call_4", "type": "function", "function": {"name": "run", "arguments": {
                         "command": ["bash", "-lc", text], "timeout_ms": i * 1000, "ratio": i / 7,
                         "env": {"A": other, "n": [i, None]}}}}]}]]
    return runs
