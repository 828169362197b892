"""Tool-call parsing: the model's raw text -> assistant text + structured tool calls.

Key invariant: parsing a whole turn and streaming it token by token give the same text and the
same calls (``parse`` is implemented by feeding the stream parser). Parsers are plugins named in
``TOOL_PARSERS``.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from typing import Any

from openforgerl.plugins import NameTable
from openforgerl.rollout.proxy.conversation import Event, TextDelta, ToolCall, ToolCallDone

TOOL_PARSERS: NameTable[type[ToolParser]] = NameTable("tool parser", {
    "hermes": "openforgerl.rollout.proxy.tool_parsers.hermes:HermesToolParser",
    "qwen3_coder": "openforgerl.rollout.proxy.tool_parsers.qwen3_coder:Qwen3CoderToolParser",
    "glm45": "openforgerl.rollout.proxy.tool_parsers.glm45:Glm45ToolParser",
    "llama3_json": "openforgerl.rollout.proxy.tool_parsers.llama3_json:Llama3JsonToolParser",
})


CALL_ID_PREFIX = "call_"
"""Every tool call id the proxy makes starts with it; dialects derive their own item ids from the rest."""


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
