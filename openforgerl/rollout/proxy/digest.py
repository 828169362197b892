"""What a call meant, in words a behaviour analysis reads: tools offered, tool results the harness
sent back, the tool calls and text the model answered. Token ids say exactly what was sampled;
these say what it was for, without a tokenizer.

Invariant: a digest is small and bounded whatever the call carried (every text cut to
``TEXT_LIMIT`` characters, a tool result to ``RESULT_LIMIT``, at most ``ITEMS_LIMIT`` items per
list), so it may ride on every record. The model's own text and call arguments get the larger limit:
a benchmark's grader reads them back as the rollout's transcript (``rollout/transcript.py``).
"""

from __future__ import annotations

import json
from typing import Any

from openforgerl.rollout.proxy.conversation import ChatRequest, ToolCall

TEXT_LIMIT = 2000
RESULT_LIMIT = 1000
ITEMS_LIMIT = 32


def cut(text: Any, limit: int = TEXT_LIMIT) -> str:
    text = text if isinstance(text, str) else json.dumps(text, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The tool results sent since the model last answered, each with the tool it answers (by order)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    asked = [c.get("function", {}).get("name", "") for c in (messages[last].get("tool_calls") or [])] \
        if last >= 0 else []
    results = [m for m in messages[last + 1:] if m.get("role") == "tool"]
    return [{"tool": asked[i] if i < len(asked) else "", "text": cut(m.get("content", ""), RESULT_LIMIT)}
            for i, m in enumerate(results[:ITEMS_LIMIT])]


def request_digest(request: ChatRequest) -> dict[str, Any]:
    """The part of a call's digest its request says (the proxy works it out while the engine answers)."""
    return {"offered": [t.get("function", {}).get("name", "") for t in request.tools[:64]],
            "results": tool_results(request.messages)}


def call_digest(request: ChatRequest, calls: list[ToolCall], text: str,
                asked: dict[str, Any] | None = None) -> dict[str, Any]:
    """``asked``: ``request_digest(request)``, when worked out already."""
    return {**(asked or request_digest(request)),
            "calls": [{"name": c.name, "args": cut(c.arguments)} for c in calls[:ITEMS_LIMIT]],
            "text": cut(text)}
