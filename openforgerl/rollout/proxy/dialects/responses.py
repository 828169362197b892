"""OpenAI Responses (``POST /v1/responses``): Codex CLI speaks only this.

Key invariant: a Responses history is a flat list of items; an assistant turn is its ``message``
item followed by its ``function_call`` items, and they fold back into one assistant turn, so the
history renders exactly as the turn the model produced. The stream is the Responses event
sequence (``response.created`` ... ``response.completed``), each event with a ``sequence_number``.
"""

from __future__ import annotations

import itertools
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
    text_of,
    with_id,
)
from openforgerl.rollout.proxy.dialect import Dialect, Reply, Turn, sse
from openforgerl.rollout.proxy.dialects.chat import arguments_value
from openforgerl.rollout.proxy.tool_parser import CALL_ID_PREFIX

ROLES = ("user", "system", "developer", "assistant")


def message_item_id(reply: Reply) -> str:
    """The id of a reply's message item: ``resp_X`` -> ``msg_X``."""
    return "msg_" + reply.id.removeprefix(Responses.id_prefix)


def call_item_id(call: ToolCall) -> str:
    """The id of a tool call's output item: ``call_X`` -> ``fc_X``."""
    return "fc_" + call.id.removeprefix(CALL_ID_PREFIX)


def add_call(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    expect(isinstance(item.get("name"), str), f"{where}: function_call needs a name")
    call = with_id({"type": "function", "function": {"name": item["name"],
                                                     "arguments": arguments_value(item.get("arguments"))}},
                   "id", item.get("call_id"))
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and last.get("_open"):
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call], "_open": True})


def parse_item(messages: list[dict[str, Any]], item: Any, i: int) -> None:
    where = f"input[{i}]"
    expect(isinstance(item, dict), f"{where} must be an object")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise BadRequest(f"{where}.role {shown(role)} is not one of {', '.join(ROLES)}")
        message = {"role": role, "content": text_of(item.get("content"), where)}
        if role == "assistant":
            message["_open"] = True  # function calls that follow belong to this turn
        messages.append(message)
    elif kind == "function_call":
        add_call(messages, item, where)
    elif kind == "function_call_output":
        output = item.get("output")
        messages.append(with_id({"role": "tool", "content": output if isinstance(output, str)
                                 else text_of(output, f"{where}.output")}, "tool_call_id", item.get("call_id")))
    else:
        return  # reasoning, web_search_call, item_reference, ...: nothing the template renders
    for message in messages[:-1]:
        message.pop("_open", None)


def parse_input(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    expect(isinstance(raw, list) and bool(raw), "input must be a string or a non-empty list of items")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        parse_item(messages, item, i)
    for message in messages:
        message.pop("_open", None)
    expect(bool(messages), "input holds no message the model can read")
    return messages


def parse_tools(raw: Any) -> list[dict[str, Any]]:
    expect(raw is None or isinstance(raw, list), "tools must be a list")
    tools = []
    for i, tool in enumerate(raw or []):
        expect(isinstance(tool, dict), f"tools[{i}] must be an object")
        if tool.get("type") == "function":  # namespace, web_search, custom, local_shell: not ours
            tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters"),
                                       f"tools[{i}]"))
    return tools


def parse_tool_choice(raw: Any) -> str:
    if raw is None or raw in ("auto", "none", "required"):
        return raw or "auto"
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("name"), str):
        return raw["name"]
    if isinstance(raw, dict):
        return "auto"  # built-in tool choices (web_search, ...) do not apply to the policy
    raise BadRequest("tool_choice must be auto, none, required or {type: function, name}")


class Responses(Dialect):
    name = "responses"
    id_prefix = "resp_"

    def parse(self, body: dict[str, Any]) -> ChatRequest:
        expect(body.get("previous_response_id") is None,
               "previous_response_id is not supported: resend the full input (store=false)")
        instructions = body.get("instructions")
        expect(instructions is None or isinstance(instructions, str), "instructions must be a string")
        messages = merge_leading_system(parse_input(body.get("input")), [instructions or ""])
        sampling = Sampling(max_tokens=positive_int(body.get("max_output_tokens"), "max_output_tokens"),
                            temperature=number(body.get("temperature"), "temperature", 0, 2),
                            top_p=number(body.get("top_p"), "top_p", 0, 1))
        parallel = body.get("parallel_tool_calls", True)
        expect(isinstance(parallel, bool), "parallel_tool_calls must be true or false")  # echoed in the answer
        return ChatRequest(messages=messages, tools=parse_tools(body.get("tools")), sampling=sampling,
                           stream=body.get("stream") is True, model=model_name(body.get("model")),
                           tool_choice=parse_tool_choice(body.get("tool_choice")),
                           extra={"parallel_tool_calls": parallel})

    @staticmethod
    def _text_item(reply: Reply, text: str, status: str) -> dict[str, Any]:
        return {"type": "message", "id": message_item_id(reply), "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed"
                else []}

    @staticmethod
    def _call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
        return {"type": "function_call", "id": call_item_id(call), "call_id": call.id, "name": call.name,
                "arguments": call.arguments if status == "completed" else "", "status": status}

    def _response(self, reply: Reply, request: ChatRequest, output: list[dict[str, Any]],
                  finish: Finish | None) -> dict[str, Any]:
        status = "in_progress" if finish is None else "incomplete" if finish.reason == "length" else "completed"
        usage = None if finish is None else {
            "input_tokens": finish.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": finish.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": finish.prompt_tokens + finish.completion_tokens}
        return {"id": reply.id, "object": "response", "created_at": reply.created, "status": status,
                "error": None, "model": reply.model, "output": output, "usage": usage,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "parallel_tool_calls": request.extra.get("parallel_tool_calls", True),
                "tool_choice": request.tool_choice if request.tool_choice in ("auto", "none", "required")
                else {"type": "function", "name": request.tool_choice}}

    def render(self, turn: Turn, request: ChatRequest, reply: Reply) -> dict[str, Any]:
        output = ([self._text_item(reply, turn.content, "completed")] if turn.content else []) + \
            [self._call_item(c) for c in turn.calls]
        return self._response(reply, request, output, turn.finish)

    async def stream(self, events: AsyncIterator[Event], request: ChatRequest, reply: Reply) -> AsyncIterator[bytes]:
        seq = itertools.count()

        def ev(kind: str, **data: Any) -> bytes:
            return sse({"type": kind, "sequence_number": next(seq), **data}, kind)

        yield ev("response.created", response=self._response(reply, request, [], None))
        yield ev("response.in_progress", response=self._response(reply, request, [], None))
        output: list[dict[str, Any]] = []
        text: list[str] | None = None
        async for event in events:
            if isinstance(event, TextDelta):
                if text is None:
                    text = []
                    for chunk in self._open_text(ev, reply, len(output)):
                        yield chunk
                text.append(event.text)
                yield ev("response.output_text.delta", item_id=message_item_id(reply), output_index=len(output),
                         content_index=0, delta=event.text, logprobs=[])
            elif isinstance(event, ToolCallDone):
                if text is not None:
                    for chunk in self._close_text(ev, reply, output, "".join(text)):
                        yield chunk
                    text = None
                for chunk in self._call_events(ev, output, event.call):
                    yield chunk
            elif isinstance(event, Finish):
                if text is not None:
                    for chunk in self._close_text(ev, reply, output, "".join(text)):
                        yield chunk
                final = self._response(reply, request, output, event)
                yield ev("response.incomplete" if final["status"] == "incomplete" else "response.completed",
                         response=final)

    def _open_text(self, ev, reply: Reply, index: int) -> list[bytes]:
        item_id = message_item_id(reply)
        return [ev("response.output_item.added", output_index=index,
                   item=self._text_item(reply, "", "in_progress")),
                ev("response.content_part.added", item_id=item_id, output_index=index, content_index=0,
                   part={"type": "output_text", "text": "", "annotations": []})]

    def _close_text(self, ev, reply: Reply, output: list[dict[str, Any]], text: str) -> list[bytes]:
        item_id, index = message_item_id(reply), len(output)
        item = self._text_item(reply, text, "completed")
        output.append(item)
        return [ev("response.output_text.done", item_id=item_id, output_index=index, content_index=0,
                   text=text, logprobs=[]),
                ev("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                   part=item["content"][0]),
                ev("response.output_item.done", output_index=index, item=item)]

    def _call_events(self, ev, output: list[dict[str, Any]], call: ToolCall) -> list[bytes]:
        index, item = len(output), self._call_item(call)
        output.append(item)
        return [ev("response.output_item.added", output_index=index, item=self._call_item(call, "in_progress")),
                ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                   delta=call.arguments),
                ev("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                   arguments=call.arguments),
                ev("response.output_item.done", output_index=index, item=item)]

    def error(self, status: int, message: str, kind: str, code: str | None = None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": "input" if code else None,
                          "code": code or status}}

    def stream_error(self, status: int, message: str, kind: str) -> bytes:
        return sse({"type": "response.failed", "response": {
            "status": "failed", "error": {"code": "server_error" if status >= 500 else kind, "message": message}}},
            "response.failed")
