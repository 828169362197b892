"""Tool-call parsing: the model's raw text -> assistant text + structured tool calls.

Key invariant: parsing a whole turn and streaming it token by token give the same text and the
same calls (``parse`` is implemented by feeding the stream parser). Parsers are plugins named in
``TOOL_PARSERS``.
"""

from __future__ import annotations

import json
import secrets
import weakref
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from openforgerl.errors import UserError
from openforgerl.log import get_logger
from openforgerl.plugins import NameTable
from openforgerl.rollout.proxy.conversation import Event, TextDelta, ToolCall, ToolCallDone, assistant_message

if TYPE_CHECKING:
    from openforgerl.rollout.proxy.template import ChatTemplate

log = get_logger(__name__)

TOOL_PARSERS: NameTable[type[ToolParser]] = NameTable("tool parser", {
    "hermes": "openforgerl.rollout.proxy.tool_parsers.hermes:HermesToolParser",
    "qwen3_coder": "openforgerl.rollout.proxy.tool_parsers.qwen3_coder:Qwen3CoderToolParser",
    "glm45": "openforgerl.rollout.proxy.tool_parsers.glm45:Glm45ToolParser",
    "llama3_json": "openforgerl.rollout.proxy.tool_parsers.llama3_json:Llama3JsonToolParser",
    "deepseek_v31": "openforgerl.rollout.proxy.tool_parsers.deepseek:DeepSeekV31ToolParser",
    "deepseek_v3": "openforgerl.rollout.proxy.tool_parsers.deepseek:DeepSeekV3ToolParser",
    "mistral": "openforgerl.rollout.proxy.tool_parsers.mistral:MistralToolParser",
    "kimi_k2": "openforgerl.rollout.proxy.tool_parsers.kimi_k2:KimiK2ToolParser",
})


CALL_ID_PREFIX = "call_"
"""Every tool call id the proxy makes starts with it (but those of a syntax whose ids the model writes and its
template writes back: Kimi K2's); dialects derive their own item ids from the rest."""


def new_call_id() -> str:
    return CALL_ID_PREFIX + secrets.token_hex(12)


class ToolStream(ABC):
    """Incremental parser for one assistant turn."""

    @abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Events made certain by ``text`` (text that may still start a tool call is held back)."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """Everything still held back, at the end of the turn."""


class ToolParser(ABC):
    """A model family's tool-call syntax."""

    markers: tuple[str, ...] = ()
    """Texts of the syntax that a tokenizer may hold as special tokens (DeepSeek's ``<｜tool▁call▁begin｜>``): the
    answer's text this parser reads keeps those (``kept_markers``), where every other special token is left out."""

    @abstractmethod
    def stream(self, tools: list[dict[str, Any]] | None = None) -> ToolStream:
        """A fresh incremental parser for a call offering ``tools`` (OpenAI's form: ``{"type": "function",
        "function": {"name", "parameters"}}``; a syntax whose arguments are untyped text reads their types there)."""

    @abstractmethod
    def format(self, calls: list[ToolCall]) -> str:
        """The text the model writes for ``calls`` (used by the scripted engine)."""

    def forced_prefix(self, name: str | None) -> str:
        """Text that commits the model to a tool call (to ``name`` if given), for tool_choice."""
        return ""

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> tuple[str, list[ToolCall]]:
        stream = self.stream(tools)
        events = stream.feed(text) + stream.finish()
        content = "".join(e.text for e in events if isinstance(e, TextDelta))
        return content, [e.call for e in events if isinstance(e, ToolCallDone)]


def make_tool_parser(name: str) -> ToolParser:
    return TOOL_PARSERS.load(name)()


def kept_markers(template: ChatTemplate, parser: ToolParser) -> dict[int, str]:
    """The special ids of ``parser``'s markers in ``template``'s vocabulary, by id, as the text of a sampled answer
    keeps them for the parser (``ChatTemplate.decode_keeping``); empty for a syntax spelled in plain text."""
    if not parser.markers:
        return {}
    try:
        known = _markers.setdefault(template, {})
    except TypeError:  # a template that cannot be weakly referenced: looked up every time
        known = {}
    if parser.markers not in known:
        known[parser.markers] = template.special_ids(parser.markers)
    return known[parser.markers]


_markers: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], dict[int, str]]] = weakref.WeakKeyDictionary()


AUTO = "auto"
"""``proxy.tool_parser = "auto"``: the parser that reads the calls the policy's chat template writes."""

PROBE_TOOLS = [{"type": "function", "function": {
    "name": "forge_probe", "description": "Shows how the policy writes a tool call.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "count": {"type": "integer"}},
                   "required": ["path"]}}}]
PROBE_ARGUMENTS = {"path": "notes/a b.txt", "count": 2}
PROBE_IDS = ("forge0001", "functions.forge_probe:0")
"""The probe call's ids, tried in turn until the template writes the call's name: nine letters and digits first
(Mistral's templates refuse any other), then Kimi K2's form (its template writes the id in place of the name)."""


def probe_ids(template: ChatTemplate) -> list[int] | None:
    """The ids the policy samples for one call to ``forge_probe``: the chat template's render of that call in an
    answer, encoded. None when the template writes no calls in an answer (or refuses every probe)."""
    ask = [{"role": "user", "content": "Call the probe."}]
    for call_id in PROBE_IDS:
        call = ToolCall(id=call_id, name="forge_probe", arguments=json.dumps(PROBE_ARGUMENTS))
        try:
            prompt = template.render(ask, PROBE_TOOLS, True)
            full = template.render([*ask, assistant_message("", [call])], PROBE_TOOLS, False)
        except Exception as exc:  # a template that refuses the probe (raise_exception) tells nothing about its syntax
            log.debug("the chat template does not render a probe call with id %s: %s", call_id, exc)
            continue
        at = next((i for i, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b),
                  min(len(prompt), len(full)))
        answer = full[at:]
        end = template.end_of_turn
        if end and end in answer:
            answer = answer[:answer.index(end)]
        if "forge_probe" in answer:
            return template.encode(answer)
    return None


def written_call(template: ChatTemplate, parser: ToolParser | None = None) -> str | None:
    """The text of ``probe_ids`` as the proxy reads it off the engine for ``parser``: decoded with the special
    tokens left out but the parser's markers (as a sampled answer is decoded). None as for ``probe_ids``."""
    ids = probe_ids(template)
    return None if ids is None else template.decode_keeping(ids, kept_markers(template, parser) if parser else {})


def reads_probe(parser: ToolParser, text: str) -> bool:
    """Whether ``parser`` reads exactly the probe call, with its arguments, from ``text``."""
    try:
        _, calls = parser.parse(text, PROBE_TOOLS)
        return len(calls) == 1 and calls[0].name == "forge_probe" and json.loads(calls[0].arguments) == PROBE_ARGUMENTS
    except Exception:  # a parser that chokes on another family's syntax does not read it
        return False


def tool_parser_for(template: ChatTemplate, name: str, setting: str = "proxy.tool_parser") -> ToolParser:
    """The parser ``proxy.tool_parser`` names (``auto``: the first of ``TOOL_PARSERS`` that reads the template's
    calls), checked against the calls the policy's chat template writes: a parser that cannot read them would
    turn every call the policy makes into plain text, so a harness's tools would never run. A template that
    writes no calls in its answers cannot be checked (``auto`` then takes ``hermes``). Checked once per template
    and name (a trainer builds a proxy per rollout). ``setting``: where the user set ``name``, as errors and
    warnings name it."""
    try:
        known = _checked.setdefault(template, {})
    except TypeError:  # a template that cannot be weakly referenced: checked every time
        known = {}
    if name not in known:
        known[name] = _checked_name(template, name, setting)
    return make_tool_parser(known[name])


_checked: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def _checked_name(template: ChatTemplate, name: str, setting: str) -> str:
    if name != AUTO and name not in TOOL_PARSERS:
        raise UserError(f"{setting}: unknown tool parser {name!r}",
                        fix="use one of: " + ", ".join([AUTO, *TOOL_PARSERS.names()]))
    ids = probe_ids(template)
    if ids is None:
        if name == AUTO:
            log.warning("the chat template renders no tool call in an answer (or refuses to render the probe's), so "
                        "the tool parser cannot be told from it: using hermes (set %s to choose)", setting)
            return "hermes"
        return name

    def reads(parser: ToolParser) -> bool:  # each parser reads the probe as decoded for it (its markers kept)
        return reads_probe(parser, template.decode_keeping(ids, kept_markers(template, parser)))

    if name != AUTO and reads(make_tool_parser(name)):
        return name
    readers = [other for other in TOOL_PARSERS.names() if other != name and reads(make_tool_parser(other))]
    if name == AUTO and readers:
        log.info("tool calls: the %s parser reads them as the policy's chat template writes them (%s auto)",
                 readers[0], setting)
        return readers[0]
    shown = template.decode(ids).strip()  # as decoded, no marker kept
    shown = repr(shown if len(shown) <= 160 else shown[:157] + "...")
    what = f"{setting} {name!r}: " + ("no tool parser reads" if name == AUTO else "it does not read") + \
        f" the tool calls the policy's chat template writes, {shown} (as decoded, special tokens left out)"
    if readers:
        raise UserError(what, fix=f"set {setting} to {readers[0]!r} (or {AUTO!r})")
    raise UserError(what, fix="serve a policy whose tool calls are text one of these parsers reads: "
                    + ", ".join(TOOL_PARSERS.names()) + " (of syntaxes spelled in special tokens, DeepSeek's, "
                    "Mistral's and Kimi K2's are read; gpt-oss's Harmony is not supported yet)")
