"""Anthropic Messages (``POST /v1/messages``, also ``?beta=true``): Claude Code, OpenClaw, ...

Key invariant: the stream follows Anthropic's event order — ``message_start``, per content
block ``content_block_start`` / ``*_delta`` / ``content_block_stop``, then ``message_delta``
(stop reason, usage) and ``message_stop`` — with text deltas sent as tokens arrive.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from openforgerl.rollout.proxy.conversation import (
    BadRequest,
    ChatRequest,
    Event,
    Finish,
    Sampling,
    TextDelta,
    ToolCall,
    ToolCallDone,
    expect,
    function_tool,
    merge_leading_system,
    model_name,
    number,
    positive_int,
    shown,
    stop_list,
    text_of,
    with_id,
)
from openforgerl.rollout.proxy.dialect import Dialect, Reply, Turn, sse

STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "abort": "end_turn"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
               429: "rate_limit_error", 503: "overloaded_error"}


def blocks_of(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    expect(isinstance(content, list), f"{where}.content must be a string or a list of blocks")
    for j, block in enumerate(content):
        expect(isinstance(block, dict), f"{where}.content[{j}] must be an object")
    return content


def parse_assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts, calls = [], []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(text_of([block], where))
        elif kind == "tool_use":
            expect(isinstance(block.get("name"), str), f"{where}.content[{j}] tool_use needs a name")
            calls.append(with_id({"type": "function", "function": {"name": block["name"],
                                                                   "arguments": block.get("input") or {}}},
                                 "id", block.get("id")))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def parse_user(blocks: list[dict[str, Any]], where: str, role: str) -> list[dict[str, Any]]:
    """Tool results become tool turns (in order); the remaining text one user turn after them."""
    out, texts = [], []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "tool_result":
            content = block.get("content")
            out.append(with_id({"role": "tool", "content": text_of(
                content if not isinstance(content, list) else [b for b in content if isinstance(b, dict)],
                f"{where}.content[{j}]")}, "tool_call_id", block.get("tool_use_id")))
        elif kind == "text":
            texts.append(text_of([block], where))
    if texts or not out:
        out.append({"role": role, "content": "".join(texts)})
    return out


def parse_messages(raw: Any) -> list[dict[str, Any]]:
    expect(isinstance(raw, list) and bool(raw), "messages must be a non-empty list")
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        expect(isinstance(message, dict), f"{where} must be an object")
        role = message.get("role")
        blocks = blocks_of(message.get("content"), where)
        if role == "assistant":
            messages.append(parse_assistant(blocks, where))
        elif role in ("user", "system"):
            messages += parse_user(blocks, where, role)
        else:
            raise BadRequest(f"{where}.role {shown(role)} must be user or assistant")
    return messages


def parse_system(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    expect(isinstance(raw, list), "system must be a string or a list of text blocks")
    return "\n\n".join(text_of([b], f"system[{i}]") for i, b in enumerate(raw) if isinstance(b, dict))


def parse_tools(raw: Any) -> list[dict[str, Any]]:
    expect(raw is None or isinstance(raw, list), "tools must be a list")
    tools = []
    for i, tool in enumerate(raw or []):
        expect(isinstance(tool, dict), f"tools[{i}] must be an object")
        if tool.get("type") not in (None, "custom"):
            continue  # server tools (web_search_*, bash_*, ...) are not the policy's to call
        tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"),
                                   f"tools[{i}]"))
    return tools


def parse_tool_choice(raw: Any) -> str:
    if raw is None:
        return "auto"
    expect(isinstance(raw, dict), "tool_choice must be an object with a type")
    kind = raw.get("type")
    if kind == "tool":
        expect(isinstance(raw.get("name"), str), "tool_choice of type tool needs a name")
        return raw["name"]
    choice = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if choice is None:
        raise BadRequest("tool_choice.type must be auto, any, tool or none")
    return choice


class Messages(Dialect):
    name = "messages"
    id_prefix = "msg_"

    def parse(self, body: dict[str, Any]) -> ChatRequest:
        messages = merge_leading_system(parse_messages(body.get("messages")), [parse_system(body.get("system"))])
        sampling = Sampling(max_tokens=positive_int(body.get("max_tokens"), "max_tokens"),
                            temperature=number(body.get("temperature"), "temperature", 0, 2),
                            top_p=number(body.get("top_p"), "top_p", 0, 1),
                            top_k=positive_int(body.get("top_k"), "top_k"),
                            stop=stop_list(body.get("stop_sequences"), "stop_sequences"))
        return ChatRequest(messages=messages, tools=parse_tools(body.get("tools")), sampling=sampling,
                           stream=body.get("stream") is True, model=model_name(body.get("model")),
                           tool_choice=parse_tool_choice(body.get("tool_choice")))

    @staticmethod
    def _tool_use(call: ToolCall) -> dict[str, Any]:
        arguments = call.arguments_object()
        return {"type": "tool_use", "id": call.id.replace("call_", "toolu_", 1), "name": call.name,
                "input": arguments if isinstance(arguments, dict) else {"arguments": arguments}}

    def _message(self, reply: Reply, content: list[dict[str, Any]], stop: str | None,
                 finish: Finish | None, prompt_tokens: int) -> dict[str, Any]:
        return {"id": reply.id, "type": "message", "role": "assistant", "model": reply.model,
                "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens,
                          "output_tokens": finish.completion_tokens if finish else 0}}

    def render(self, turn: Turn, request: ChatRequest, reply: Reply) -> dict[str, Any]:
        content = ([{"type": "text", "text": turn.content}] if turn.content else []) + \
            [self._tool_use(c) for c in turn.calls]
        return self._message(reply, content, STOP[turn.finish.reason], turn.finish, turn.finish.prompt_tokens)

    async def stream(self, events: AsyncIterator[Event], request: ChatRequest, reply: Reply) -> AsyncIterator[bytes]:
        def ev(kind: str, **data: Any) -> bytes:
            return sse({"type": kind, **data}, kind)

        yield ev("message_start", message=self._message(reply, [], None, None, request.prompt_tokens))
        index, text_open = 0, False
        async for event in events:
            if isinstance(event, TextDelta):
                if not text_open:
                    yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
                    text_open = True
                yield ev("content_block_delta", index=index, delta={"type": "text_delta", "text": event.text})
            elif isinstance(event, ToolCallDone):
                if text_open:
                    yield ev("content_block_stop", index=index)
                    index, text_open = index + 1, False
                block = self._tool_use(event.call)
                yield ev("content_block_start", index=index, content_block=dict(block, input={}))
                yield ev("content_block_delta", index=index,
                         delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
                yield ev("content_block_stop", index=index)
                index += 1
            elif isinstance(event, Finish):
                if text_open:
                    yield ev("content_block_stop", index=index)
                yield ev("message_delta", delta={"stop_reason": STOP[event.reason], "stop_sequence": None},
                         usage={"input_tokens": event.prompt_tokens, "output_tokens": event.completion_tokens})
                yield ev("message_stop")

    def error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}

    def too_long(self, tokens: int, limit: int, at_least: bool) -> str:
        return f"prompt is too long: {tokens} tokens > {limit} maximum"  # what Claude Code looks for
