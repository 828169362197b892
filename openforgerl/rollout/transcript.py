"""A rollout's transcript as OpenClaw session events, rebuilt from the proxy's record of its calls.

Benchmarks in the PinchBench / QwenClawBench format grade ``grade(transcript, workspace_path)``
where ``transcript`` is the lines of the agent's OpenClaw session file. That file holds a
``{"type": "session", ...}`` header, then ``{"type": "message", "id", "parentId", "message": {...}}``
events whose messages are pi-ai's: ``role`` ``user`` / ``assistant`` / ``toolResult``, ``content``
a list of blocks. The assistant's tool calls are ``{"type": "toolCall", "id", "name", "arguments"}``
blocks (``arguments`` always an object); a tool result is its own message ``{"role": "toolResult",
"toolCallId", "toolName", "content": [{"type": "text", ...}], "isError"}``. Whatever harness ran,
the transcript is made here from what the proxy saw (``proxy/digest.py``), never from a file the
agent could have written.

Invariant: events are in call order — the instruction, then per model call the tool results it was
sent (answers to the previous call's tool calls) and the assistant message it got back. Texts are
the digest's (bounded), so a very long answer or result is cut, and marked so with a trailing "…";
arguments cut that way are closed where they were cut, so they still read as an object.
"""

from __future__ import annotations

import json
from typing import Any

CUT = "…"
SESSION_VERSION = 3


def transcript_events(instruction: str, calls: list[dict[str, Any]], *, cwd: str = "/app") -> list[dict[str, Any]]:
    """``calls``: a trajectory summary's calls (``Trajectory.summary()["calls"]``), in order."""
    events: list[dict[str, Any]] = [{"type": "session", "version": SESSION_VERSION, "cwd": cwd}]
    _append(events, {"role": "user", "content": [{"type": "text", "text": instruction}]})
    asked: list[tuple[str, str]] = []  # (id, name) of the previous answer's tool calls
    numbered = 0
    for call in calls:
        digest = call.get("digest")
        if call.get("status") != "ok" or not digest:
            continue
        for n, result in enumerate(digest.get("results", [])):
            call_id, name = asked[n] if n < len(asked) else ("", "")
            _append(events, {"role": "toolResult", "toolCallId": call_id, "toolName": result.get("tool") or name,
                             "content": [{"type": "text", "text": result.get("text", "")}], "isError": False})
        message = _assistant(digest, call, numbered)
        asked = [(block["id"], block["name"]) for block in message["content"] if block["type"] == "toolCall"]
        numbered += len(asked)
        _append(events, message)
    return events


def _append(events: list[dict[str, Any]], message: dict[str, Any]) -> None:
    """Wrap ``message`` in an event chained to the one before by ``parentId``, as OpenClaw writes them."""
    parent = events[-1].get("id") if events[-1].get("type") == "message" else None
    events.append({"type": "message", "id": f"{len(events):08x}", "parentId": parent, "message": message})


def _assistant(digest: dict[str, Any], call: dict[str, Any], numbered: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if digest.get("text"):
        content.append({"type": "text", "text": digest["text"]})
    for n, tool_call in enumerate(digest.get("calls", [])):
        content.append({"type": "toolCall", "id": f"call_{numbered + n + 1}", "name": tool_call.get("name", ""),
                        "arguments": _arguments(tool_call.get("args", ""))})
    message: dict[str, Any] = {"role": "assistant", "content": content,
                               "stopReason": "toolUse" if digest.get("calls") else "stop"}
    if "tokens_in" in call:
        tokens_in, tokens_out = int(call.get("tokens_in", 0)), int(call.get("tokens_out", 0))
        message["usage"] = {"input": tokens_in, "output": tokens_out, "totalTokens": tokens_in + tokens_out}
    return message


def to_jsonl(events: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in events)


def _arguments(args: str) -> dict[str, Any]:
    """The call's arguments as an object: parsed; closed where the digest cut them; else ``{"input": text}``."""
    try:
        value = json.loads(args)
    except ValueError:
        value = _closed(args)
    if isinstance(value, dict):
        return value
    return {"input": args if isinstance(args, str) else json.dumps(args)} if args not in ("", None) else {}


def _closed(text: str) -> Any:
    """JSON cut by the digest (``text`` ends in "…") closed at the cut: the open string ends in "…",
    open objects and arrays are closed. None when it will not parse (cut inside a key, say)."""
    if not isinstance(text, str) or not text.endswith(CUT):
        return None
    body = text[: -len(CUT)]
    for back in range(8):  # a cut escape sequence (\u00e) cannot be closed: drop its last characters
        candidate = _close(body[: len(body) - back])
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def _close(body: str) -> str:
    closers: list[str] = []
    in_string = escaped = False
    for char in body:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "{[":
            closers.append("}" if char == "{" else "]")
        elif char in "}]" and closers:
            closers.pop()
    tail = (CUT + '"') if in_string and not escaped else ""
    return body + tail + "".join(reversed(closers))
