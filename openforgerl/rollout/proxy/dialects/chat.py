"""OpenAI Chat Completions (``POST /v1/chat/completions``): opencode, Qwen Code, mini-swe-agent, ...

Key invariant: the stream is the same answer as the JSON body, as ``chat.completion.chunk``
deltas: a role chunk, content deltas as tokens arrive, one delta per finished tool call, a
finish chunk, an optional usage chunk, then ``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import orjson

from openforgerl.rollout.proxy.conversation import (
    BadRequest,
    ChatRequest,
    Event,
    Finish,
    Sampling,
    TextDelta,
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

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "abort": "stop"}


def arguments_value(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments)
        except orjson.JSONDecodeError:  # NaN, huge integers: what json takes and orjson does not
            try:
                return json.loads(arguments)
            except ValueError:
                return arguments
    return arguments if arguments is not None else {}


def parse_tool_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    expect(isinstance(raw, list), f"{where}.tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest(f"{where}.tool_calls[{j}] needs function.name")
        calls.append(with_id({"type": "function", "function": {
            "name": function["name"], "arguments": arguments_value(function.get("arguments"))}}, "id", call.get("id")))
    return calls


def parse_message(message: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    expect(isinstance(message, dict), f"{where} must be an object")
    role = message.get("role")
    content = text_of(message.get("content"), where)
    if role in ("system", "developer", "user"):
        return {"role": role, "content": content}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": content}
        calls = message.get("tool_calls")
        if message.get("function_call") and not calls:
            calls = [{"function": message["function_call"]}]
        if calls:
            out["tool_calls"] = parse_tool_calls(calls, where)
        return out
    if role in ("tool", "function"):
        return with_id({"role": "tool", "content": content}, "tool_call_id", message.get("tool_call_id"))
    raise BadRequest(f"{where}.role {shown(role)} is not one of system, developer, user, assistant, tool")


def parse_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("tools") or []
    expect(isinstance(raw, list), "tools must be a list")
    tools = []
    for i, tool in enumerate(raw):
        expect(isinstance(tool, dict), f"tools[{i}] must be an object")
        if tool.get("type", "function") != "function":
            continue  # custom/built-in tool types have no place in a function-calling template
        spec = tool.get("function")
        expect(isinstance(spec, dict), f"tools[{i}].function must be an object")
        tools.append(function_tool(spec.get("name"), spec.get("description"), spec.get("parameters"),
                                   f"tools[{i}]"))
    for i, spec in enumerate(body.get("functions") or []):
        expect(isinstance(spec, dict), f"functions[{i}] must be an object")
        tools.append(function_tool(spec.get("name"), spec.get("description"), spec.get("parameters"),
                                   f"functions[{i}]"))
    return tools


def parse_tool_choice(value: Any) -> str:
    if value is None:
        return "auto"
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        expect(isinstance(name, str), "tool_choice.function.name must be a string")
        return name
    raise BadRequest("tool_choice must be auto, none, required or {type: function, function: {name}}")


class ChatCompletions(Dialect):
    name = "chat"
    id_prefix = "chatcmpl-"

    def parse(self, body: dict[str, Any]) -> ChatRequest:
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise BadRequest("messages must be a non-empty list")
        expect(body.get("n") in (None, 1), "only n=1 is supported")
        messages = merge_leading_system([parse_message(m, i) for i, m in enumerate(raw)], [])
        options = body.get("stream_options")
        sampling = Sampling(
            max_tokens=positive_int(body.get("max_completion_tokens", body.get("max_tokens")), "max_tokens"),
            temperature=number(body.get("temperature"), "temperature", 0, 2),
            top_p=number(body.get("top_p"), "top_p", 0, 1),
            stop=stop_list(body.get("stop")),
            seed=body.get("seed") if isinstance(body.get("seed"), int) else None)
        return ChatRequest(messages=messages, tools=parse_tools(body), sampling=sampling,
                           stream=body.get("stream") is True, model=model_name(body.get("model")),
                           tool_choice=parse_tool_choice(body.get("tool_choice")),
                           include_usage=isinstance(options, dict) and options.get("include_usage") is True)

    def render(self, turn: Turn, request: ChatRequest, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
        if turn.calls:
            message["tool_calls"] = [self._call(c) for c in turn.calls]
        return {"id": reply.id, "object": "chat.completion", "created": reply.created, "model": reply.model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": FINISH[turn.finish.reason]}],
                "usage": self._usage(turn.finish)}

    @staticmethod
    def _call(call) -> dict[str, Any]:
        return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}

    @staticmethod
    def _usage(finish: Finish) -> dict[str, int]:
        return {"prompt_tokens": finish.prompt_tokens, "completion_tokens": finish.completion_tokens,
                "total_tokens": finish.prompt_tokens + finish.completion_tokens}

    async def stream(self, events: AsyncIterator[Event], request: ChatRequest, reply: Reply) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({"id": reply.id, "object": "chat.completion.chunk", "created": reply.created,
                        "model": reply.model,
                        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        yield chunk({"role": "assistant", "content": ""})
        n_calls = 0
        async for event in events:
            if isinstance(event, TextDelta):
                yield chunk({"content": event.text})
            elif isinstance(event, ToolCallDone):
                yield chunk({"tool_calls": [dict(self._call(event.call), index=n_calls)]})
                n_calls += 1
            elif isinstance(event, Finish):
                yield chunk({}, FINISH[event.reason])
                if request.include_usage:
                    yield sse({"id": reply.id, "object": "chat.completion.chunk", "created": reply.created,
                               "model": reply.model, "choices": [], "usage": self._usage(event)})
        yield b"data: [DONE]\n\n"

    def error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": "messages" if code else None,
                          "code": code or status}}
