"""Request shapes real harnesses send (../shared notes: HARNESSES.md), as test data."""

from __future__ import annotations

import copy
import json
from typing import Any

BIG = "You are a coding agent running in a terminal. Follow the user's instructions carefully. " * 190  # ~17k chars
PARAMS = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def codex_body() -> dict[str, Any]:
    """Codex CLI: Responses, developer messages, 9 tools incl. namespace and web_search, no instructions."""
    fn = lambda name: {"type": "function", "name": name, "description": f"{name} tool", "strict": False,  # noqa: E731
                       "parameters": PARAMS}
    return {
        "model": "smollm2", "stream": True, "store": False, "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199-session", "tool_choice": "auto",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": BIG}]},
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "<permissions instructions>full access</permissions instructions>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "<environment_context><cwd>/tmp/w</cwd></environment_context>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "create a file hello.txt containing hi"}]},
        ],
        "tools": [fn("shell"), fn("update_plan"), fn("view_image"), fn("list_mcp_resources"),
                  fn("read_mcp_resource"), fn("exec_command"),
                  {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}},
                  {"type": "namespace", "name": "mcp__fs", "tools": [fn("read")]},
                  {"type": "web_search", "external_web_access": False}],
    }


def codex_next(body: dict[str, Any], response_items: list[dict[str, Any]], output: str) -> dict[str, Any]:
    """The next Codex call: full history resent (reasoning item included), plus the tool outputs."""
    nxt = copy.deepcopy(body)
    nxt["input"].append({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"})
    for item in response_items:
        nxt["input"].append({k: v for k, v in item.items() if k != "status"})
        if item["type"] == "function_call":
            nxt["input"].append({"type": "function_call_output", "call_id": item["call_id"], "output": output})
    return nxt


CLAUDE_HEADERS = {"anthropic-version": "2023-06-01",
                  "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-"
                                    "2025-05-14,context-management-2025-06-27,oauth-2025-04-20"}


def claude_body() -> dict[str, Any]:
    """Claude Code: system as 3 blocks AND a system-role message, 12 tools (one deferred), thinking."""
    tool = lambda name, **kw: {"name": name, "description": f"{name} tool",  # noqa: E731
                               "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                                                  "content": {"type": "string"}}}, **kw}
    names = ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "NotebookEdit", "WebFetch", "TodoWrite",
             "BashOutput"]
    return {
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 32000, "stream": True,
        "thinking": {"type": "adaptive"}, "metadata": {"user_id": "user_0abc_account__session_1234"},
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.1"},
                   {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                    "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": BIG[:6000], "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "system", "content": "<system-reminder>todo list is empty</system-reminder>"},
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                {"type": "text", "text": "create a file hello.txt containing hi", "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": [tool(n) for n in names] + [tool("WebSearch", defer_loading=True)],
    }


def claude_next(body: dict[str, Any], content: list[dict[str, Any]], output: str) -> dict[str, Any]:
    nxt = copy.deepcopy(body)
    nxt["messages"].append({"role": "assistant", "content": content})
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": [{"type": "text", "text": output}]}
               for b in content if b["type"] == "tool_use"]
    nxt["messages"].append({"role": "user", "content": results})
    return nxt


CHAT_TOOLS = [{"type": "function", "function": {"name": "write_file", "description": "Write a file",
                                                "parameters": {"type": "object", "properties": {
                                                    "path": {"type": "string"}, "content": {"type": "string"}}}}}]


def opencode_title_body() -> dict[str, Any]:
    """opencode's first call: a title request without tools."""
    return {"model": "smollm2", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 32,
            "messages": [{"role": "system", "content": "You are a title generator."},
                         {"role": "user", "content": "create a file hello.txt containing hi"}]}


def chat_body(stream: bool, *, qwen_parts: bool = False) -> dict[str, Any]:
    """opencode / Qwen Code / mini-swe-agent / OpenHands main calls (Chat Completions)."""
    user: Any = "create a file hello.txt containing hi"
    if qwen_parts:  # Qwen Code splits the user message into 5 parts
        user = [{"type": "text", "text": t} for t in ("<env>", "linux", "</env>", "create a file", "hello.txt containing hi")]
    body = {"model": "smollm2", "stream": stream, "messages": [
        {"role": "system", "content": "You are an agent."}, {"role": "user", "content": user}],
        "tools": CHAT_TOOLS, "tool_choice": "auto", "temperature": 0.0, "max_completion_tokens": 512}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chat_next(body: dict[str, Any], message: dict[str, Any], output: str, *, parts: bool = False) -> dict[str, Any]:
    nxt = copy.deepcopy(body)
    nxt["messages"].append(message)
    for call in message.get("tool_calls") or []:
        content: Any = [{"type": "text", "text": output}] if parts else output  # Qwen Code: arrays of parts
        nxt["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return nxt


def openclaw_body() -> dict[str, Any]:
    """OpenClaw (Anthropic mode): a ~26k-char system prompt and two consecutive user messages."""
    return {"model": "smollm2", "max_tokens": 4096, "stream": True, "system": (BIG * 2)[:26000],
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "user", "content": "create a file hello.txt containing hi"}],
            "tools": [{"name": "write_file", "description": "Write a file", "input_schema": {"type": "object"}}]}


def canonical_args(text: str) -> Any:
    return json.loads(text)
