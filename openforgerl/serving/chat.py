"""One chat completion against a served model, asking for the exact token ids and logprobs (``forge chat``).

Invariant: the reply carries what the server sampled, token for token: ``token_ids`` and ``logprobs``
have one entry per generated token, in order, as vLLM returned them (nothing re-tokenised here).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from openforgerl.errors import ProviderError, UserError

# The tool ``forge chat --tool-choice required`` offers when no --tool-spec is given.
WRITE_FILE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text content to a file at the given path.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "File path to write."},
                           "content": {"type": "string", "description": "Text to write."}},
            "required": ["path", "content"],
        },
    },
}


@dataclass(frozen=True)
class ChatReply:
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    tokens: list[str]
    logprobs: list[float]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def load_tools(path: str | Path) -> list[dict[str, Any]]:
    """Tools from a JSON file: one OpenAI tool object, a list of them, or bare function definitions."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read tool spec {path}: {exc.strerror}", fix="pass an existing JSON file") from exc
    except ValueError as exc:
        raise UserError(f"tool spec {path} is not valid JSON: {exc}", fix="correct the JSON") from exc
    tools = data if isinstance(data, list) else [data]
    if not all(isinstance(tool, dict) and ("function" in tool or "name" in tool) for tool in tools):
        raise UserError(f"tool spec {path} holds no tool definitions",
                        fix='write {"type": "function", "function": {"name": ..., "parameters": {...}}} '
                            "or a list of them")
    return [tool if "function" in tool else {"type": "function", "function": tool} for tool in tools]


def tool_choice_value(choice: str | None, tools: list[dict[str, Any]]) -> str | dict[str, Any] | None:
    """auto/none/required pass through; any other word names one of the tools."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    names = [tool["function"]["name"] for tool in tools]
    if choice not in names:
        raise UserError(f"--tool-choice {choice!r} names no offered tool",
                        fix=f"use auto, none, required or one of: {', '.join(names)}")
    return {"type": "function", "function": {"name": choice}}


def chat_request(model: str, prompt: str, *, tools: list[dict[str, Any]] | None = None,
                 tool_choice: str | dict[str, Any] | None = None, max_tokens: int = 48,
                 temperature: float = 0.0) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": temperature,
                            "logprobs": True, "return_token_ids": True}
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return body


def send_chat(base_url: str, body: dict[str, Any], timeout_s: float = 300.0) -> ChatReply:
    url = base_url.rstrip("/") + "/chat/completions"
    try:
        answer = httpx.post(url, json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ProviderError(f"cannot reach {url}: {exc}",
                            fix="start the server with forge serve, or pass the right --base-url") from exc
    if answer.status_code != 200:
        raise ProviderError(f"{url} answered {answer.status_code}: {answer.text[:300]}",
                            fix="check the request (model name, tools) and the server log")
    return parse_reply(answer.json())


def parse_reply(data: dict[str, Any]) -> ChatReply:
    choice = data["choices"][0]
    message = choice.get("message") or {}
    content = (choice.get("logprobs") or {}).get("content") or []
    return ChatReply(text=message.get("content") or "", tool_calls=message.get("tool_calls") or [],
                     finish_reason=choice.get("finish_reason"),
                     prompt_token_ids=data.get("prompt_token_ids") or [], token_ids=choice.get("token_ids") or [],
                     tokens=[entry.get("token", "") for entry in content],
                     logprobs=[entry.get("logprob") for entry in content], raw=data)
