"""A rollout's transcript as OpenClaw session events, rebuilt from the proxy's record of its calls.

Benchmarks in the PinchBench / QwenClawBench format grade ``grade(transcript, workspace_path)``
where ``transcript`` is the agent's session log: ``{"type": "message", "message": {"role": ...,
"content": [...]}}`` events, the assistant's tool calls as ``{"type": "toolCall", "name",
"arguments"}`` items and tool results as ``role: "toolResult"`` messages. Whatever harness ran,
the transcript is made here from what the proxy saw (``proxy/digest.py``), never from a file the
agent could have written.

Invariant: events are in call order — the instruction, then per model call the tool results it was
sent (answers to the previous call's tool calls) and the assistant message it got back. Texts are
the digest's (bounded), so a very long answer or result is cut, and marked so with a trailing "…".
"""

from __future__ import annotations

import json
from typing import Any


def transcript_events(instruction: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``calls``: a trajectory summary's calls (``Trajectory.summary()["calls"]``), in order."""
    events = [_message("user", [{"type": "text", "text": instruction}])]
    for call in calls:
        digest = call.get("digest")
        if call.get("status") != "ok" or not digest:
            continue
        for result in digest.get("results", []):
            events.append(_message("toolResult", [{"type": "text", "text": result.get("text", "")}],
                                   toolName=result.get("tool", "")))
        content: list[dict[str, Any]] = []
        if digest.get("text"):
            content.append({"type": "text", "text": digest["text"]})
        for tool_call in digest.get("calls", []):
            content.append({"type": "toolCall", "name": tool_call.get("name", ""),
                            "arguments": _arguments(tool_call.get("args", ""))})
        events.append(_message("assistant", content))
    return events


def to_jsonl(events: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in events)


def _message(role: str, content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "message", "message": {"role": role, "content": content, **extra}}


def _arguments(args: str) -> Any:
    """The call's arguments as the model wrote them: an object when they parse, else the text."""
    try:
        return json.loads(args)
    except ValueError:
        return args
