"""A tokenizer-free chat template, so the proxy's unit tests run without the model.

``CharTemplate`` gives every byte its own id (0-255) and the turn markers special ids above that,
the way an HF tokenizer treats added special tokens. It renders the Hermes / Qwen layout of
``templates/chat/smollm2_tools.jinja``: tool signatures in the system turn inside
``<tools></tools>``, assistant calls as ``<tool_call>`` blocks that the ``hermes`` parser reads
back, tool results as ``<tool_response>`` in a user turn, ``<|im_start|>assistant\\n`` as the
generation prompt. For a conversation that starts with a system message and has no two tool
results in a row, the text is the SmolLM2 template's byte for byte; only the ids differ. Unlike
that template it adds no default system prompt, and gives each tool result its own user turn
(which keeps ``render`` concatenative).

Key invariants: ``decode(encode(text), skip_special=False) == text`` for any valid Unicode text;
and ``render`` is concatenative: every message after the first renders on its own, so the text of
a non-empty conversation is a prefix of the text of any conversation that extends it (with the
generation prompt: of any that extends it with an assistant message).
"""

from __future__ import annotations

import json
import re
from typing import Any

from openforgerl.rollout.proxy.template import ChatTemplate

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_IDS = {IM_START: 256, IM_END: 257}
GENERATION_PROMPT = f"{IM_START}assistant\n"
TOOLS_INTRO = ("# Tools\n\nYou can call the functions below to help with the request. "
               "Their signatures are inside <tools></tools> tags:\n<tools>")
TOOLS_OUTRO = ("\n</tools>\n\nTo call a function, reply with a JSON object holding its name and arguments "
               "inside <tool_call></tool_call> tags, one pair of tags per call:\n"
               '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def tojson(value: Any) -> str:
    """JSON as HF chat templates write it (``tojson``: non-ASCII kept, ``", "`` and ``": "``)."""
    return json.dumps(value, ensure_ascii=False)


def text_of(content: Any) -> str:
    """String, None, or a list of parts (text parts kept, every part joined by a newline)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(map(part_text, content))


def part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    return part.get("text", "") if part.get("type") == "text" else ""


def call_json(call: dict[str, Any]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    return f'{{"name": {tojson(function["name"])}, "arguments": ' \
           f'{arguments if isinstance(arguments, str) else tojson(arguments)}}}'


def system_turn(system: str | None, tools: list[dict[str, Any]]) -> str:
    signatures = "".join("\n" + tojson(tool) for tool in tools)
    said = "" if system is None else f"{system}\n\n"  # an empty system message keeps its blank line, as SmolLM2's
    return f"{IM_START}system\n{said}{TOOLS_INTRO}{signatures}{TOOLS_OUTRO}{IM_END}\n"


def message_turn(message: dict[str, Any]) -> str:
    role, content = message["role"], text_of(message.get("content"))
    if role == "tool":
        return f"{IM_START}user\n<tool_response>\n{content}\n</tool_response>{IM_END}\n"
    calls = message.get("tool_calls") if role == "assistant" else None
    if calls:
        said = f"\n{content}" if content else ""
        blocks = "".join(f"\n<tool_call>\n{call_json(call)}\n</tool_call>" for call in calls)
        return f"{IM_START}assistant{said}{blocks}{IM_END}\n"
    return f"{IM_START}{role}\n{content}{IM_END}\n"


class CharTemplate(ChatTemplate):
    """Byte ids plus ``<|im_start|>`` / ``<|im_end|>``; a Hermes-style, concatenative render."""

    def __init__(self) -> None:
        self._bytes = [bytes([b]) for b in range(256)] + [b""] * len(SPECIAL_IDS)
        self._spelled = self._bytes[:256] + [text.encode() for text in SPECIAL_IDS]
        self._specials = re.compile("(" + "|".join(map(re.escape, SPECIAL_IDS)) + ")")

    def render(self, messages, tools, add_generation_prompt):
        head, rest = "", messages
        if tools:
            system = messages[0] if messages and messages[0]["role"] == "system" else None
            head = system_turn(None if system is None else text_of(system.get("content")), tools)
            rest = messages[1:] if system is not None else messages
        return head + "".join(map(message_turn, rest)) + (GENERATION_PROMPT if add_generation_prompt else "")

    def encode(self, text):
        ids: list[int] = []
        for piece in self._specials.split(text):
            special = SPECIAL_IDS.get(piece)
            if special is None:
                ids += piece.encode("utf-8")
            else:
                ids.append(special)
        return ids

    def decode(self, ids, skip_special=True):
        table = self._bytes if skip_special else self._spelled
        return b"".join([table[i] for i in ids]).decode("utf-8", "replace")

    @property
    def stop_ids(self):
        return frozenset({SPECIAL_IDS[IM_END]})

    @property
    def end_of_turn(self):
        return IM_END

    def token_bytes(self):
        return self._bytes
