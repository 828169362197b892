"""The one internal request/response shape every dialect translates to and from.

Key invariant: two requests that mean the same conversation normalise to equal ``messages``
(canonical OpenAI-chat dicts: string content, ``tool_calls`` with dict arguments), so the chat
template renders them to the same text whatever dialect or content-part layout they came in.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass, field
from typing import Any, Literal

from openforgerl.errors import UserError

MAX_JSON_DEPTH = 128
"""Deepest nesting of lists/objects the proxy accepts where it writes a value back out as JSON
(metadata into logs and answers): orjson refuses to write more than 254 levels."""


class BadRequest(UserError):
    """A request the proxy must refuse with a 4xx (in the caller's dialect)."""

    def __init__(self, what: str, *, status: int = 400, kind: str = "invalid_request_error") -> None:
        self.status, self.kind = status, kind
        super().__init__(what)


class ContextTooLong(BadRequest):
    """The prompt does not fit the model's context (no room for one sampled token). Harnesses react to
    this error (Codex: code ``context_length_exceeded``, Claude Code: "prompt is too long") by compacting."""

    def __init__(self, tokens: int, limit: int, *, at_least: bool = False) -> None:
        self.tokens, self.limit, self.at_least = tokens, limit, at_least
        more = "at least " if at_least else ""
        super().__init__(f"the prompt has {more}{tokens} tokens; the model's context is {limit}")


def nesting_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether lists/objects in ``value`` nest more than ``limit`` levels deep (level by level, no recursion)."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (re-serialised only if it was not JSON)

    def arguments_object(self) -> Any:
        """The arguments as JSON values; as the text itself when they are not JSON (or nest too deep to
        be written back out)."""
        try:
            value = json.loads(self.arguments)
        except (ValueError, RecursionError):
            return self.arguments
        return self.arguments if nesting_exceeds(value) else value


@dataclass
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


ToolChoice = Literal["auto", "none", "required"] | str  # str: the name of one function


@dataclass
class ChatRequest:
    """A dialect request, normalised."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # [{"type": "function", "function": {name, description, parameters}}]
    sampling: Sampling
    stream: bool = False
    model: str = ""
    tool_choice: ToolChoice = "auto"
    include_usage: bool = False
    prompt_tokens: int = 0  # filled in by the proxy once the prompt is built
    call: int = -1  # the call's index in its rollout, filled in by the proxy once the call begins
    extra: dict[str, Any] = field(default_factory=dict)  # dialect bits echoed back (e.g. tools list)


@dataclass
class TextDelta:
    text: str


@dataclass
class ToolCallDone:
    call: ToolCall


@dataclass
class Finish:
    reason: Literal["stop", "length", "tool_calls", "abort"]
    prompt_tokens: int
    completion_tokens: int


Event = TextDelta | ToolCallDone | Finish


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 40, 40, 2


def shown(value: Any) -> str:
    """A client's value for an error message: short, whatever its size or nesting."""
    return _SHORT.repr(value)


def model_name(value: Any) -> str:
    expect(value is None or isinstance(value, str), "model must be a string")
    return value or ""


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise BadRequest(what)


def text_of(content: Any, where: str) -> str:
    """Content given as a string, None, or a list of parts -> one string (non-text parts dropped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    expect(isinstance(content, list), f"{where}: content must be a string or a list of parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        expect(isinstance(part, dict), f"{where}: each content part must be an object")
        text = part.get("text")
        if isinstance(text, str):
            texts.append(text)
        elif part.get("type") in ("text", "input_text", "output_text"):
            raise BadRequest(f"{where}: a {part.get('type')} part needs a string 'text'")
        # images, files, refusals and the like carry no text a text-only policy can read
    return "\n".join(texts)  # as vLLM and our chat templates join text parts


def with_id(message: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``message`` with ``key`` (a call's ``id``, a tool turn's ``tool_call_id``) when the request gave one: some
    templates write call ids into the prompt (Mistral's: their last 9 characters), most leave them out."""
    if isinstance(value, str) and value:
        message[key] = value
    return message


def assistant_message(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_object()}} for c in calls]
    return message


def function_tool(name: Any, description: Any, parameters: Any, where: str) -> dict[str, Any]:
    expect(isinstance(name, str) and name != "", f"{where}: a function tool needs a non-empty 'name'")
    spec: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        spec["description"] = description
    if parameters is not None:
        if not isinstance(parameters, dict):  # the message only when it is needed: shown() is not free
            raise BadRequest(f"{where}: tool {shown(name)} parameters must be an object")
        spec["parameters"] = parameters
    return {"type": "function", "function": spec}


def merge_leading_system(messages: list[dict[str, Any]], system_texts: list[str]) -> list[dict[str, Any]]:
    """Fold top-level system text and the leading system/developer messages into one system turn.

    Later system/developer messages stay where they are, as ``system`` turns, so a history that
    grows at its end still renders as a prefix of the next call.
    """
    texts = [t for t in system_texts if t]
    start = 0
    while start < len(messages) and messages[start]["role"] in ("system", "developer"):
        texts.append(messages[start]["content"])
        start += 1
    rest = [dict(m, role="system") if m["role"] == "developer" else m for m in messages[start:]]
    return ([{"role": "system", "content": "\n\n".join(texts)}] if texts else []) + rest


def positive_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    expect(isinstance(value, int) and not isinstance(value, bool) and value > 0,
           f"{name} must be a positive integer")
    return value


def number(value: Any, name: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    expect(isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high,
           f"{name} must be a number in [{low}, {high}]")
    return float(value)


def stop_list(value: Any, name: str = "stop") -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    expect(isinstance(value, list) and all(isinstance(s, str) for s in value),
           f"{name} must be a string or a list of strings")
    return list(value)
