"""A wire dialect: how one API family asks for a turn and how it wants the answer back.

Key invariant: dialects only translate. They turn a request body into a ``ChatRequest`` and turn
the proxy's events (text deltas, finished tool calls, the finish) into that API's JSON body or
its own SSE event sequence; no template, engine or recording logic lives here.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from openforgerl.plugins import NameTable
from openforgerl.rollout.proxy.conversation import ChatRequest, Event, Finish, TextDelta, ToolCall, ToolCallDone

DIALECTS: NameTable[type[Dialect]] = NameTable("dialect", {
    "chat": "openforgerl.rollout.proxy.dialects.chat:ChatCompletions",
    "responses": "openforgerl.rollout.proxy.dialects.responses:Responses",
    "messages": "openforgerl.rollout.proxy.dialects.messages:Messages",
})


@dataclass
class Turn:
    """A finished assistant turn, for non-streaming answers."""

    content: str
    calls: list[ToolCall]
    finish: Finish


@dataclass
class Reply:
    """Identity of one answer: its id, model name and creation time."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    body = data.encode() if isinstance(data, str) else orjson.dumps(data)
    return (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + body + b"\n\n"


async def collect(events: AsyncIterator[Event]) -> Turn:
    texts, calls, finish = [], [], None
    async for event in events:
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, ToolCallDone):
            calls.append(event.call)
        elif isinstance(event, Finish):
            finish = event
    assert finish is not None, "the proxy always ends a turn with Finish"
    return Turn("".join(texts), calls, finish)


class Dialect(ABC):
    """One API family (OpenAI Chat, OpenAI Responses, Anthropic Messages)."""

    name: str
    id_prefix: str

    @abstractmethod
    def parse(self, body: dict[str, Any]) -> ChatRequest:
        """A request body -> the normalised request; raises ``BadRequest`` with a useful message."""

    @abstractmethod
    def render(self, turn: Turn, request: ChatRequest, reply: Reply) -> dict[str, Any]:
        """The non-streaming answer body."""

    @abstractmethod
    def stream(self, events: AsyncIterator[Event], request: ChatRequest, reply: Reply) -> AsyncIterator[bytes]:
        """The SSE byte chunks of a streaming answer, emitted as events arrive."""

    @abstractmethod
    def error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        """An error body in this dialect's shape (``code``: a machine-readable reason, where it has one)."""

    def too_long(self, tokens: int, limit: int, at_least: bool) -> str:
        """The message of a prompt over the context, as this API words it (OpenAI's by default)."""
        more = "at least " if at_least else ""
        return (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                f"{more}{tokens} tokens. Please reduce the length of the messages.")

    def stream_error(self, status: int, message: str, kind: str) -> bytes:
        """An error that happens after a stream started (default: an SSE ``error`` event)."""
        return sse(self.error(status, message, kind), "error")


def make_dialect(name: str) -> Dialect:
    return DIALECTS.load(name)()
