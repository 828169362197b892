"""The transcript a verifier gets: OpenClaw session events made from the proxy's record of the calls."""

from __future__ import annotations

import json

from openforgerl.rollout.proxy.digest import TEXT_LIMIT, cut
from openforgerl.rollout.transcript import transcript_events


def answered(args: str, text: str = "") -> dict:
    return {"status": "ok", "digest": {"text": text, "results": [], "calls": [{"name": "write", "args": args}]}}


def tool_call(event: dict) -> dict:
    return next(block for block in event["message"]["content"] if block["type"] == "toolCall")


def test_arguments_cut_by_the_digest_still_read_as_an_object_marked_cut():
    content = "word " * 1000
    args = cut(json.dumps({"path": "report.md", "content": content}))
    assert len(args) == TEXT_LIMIT + 1  # the digest cut it, inside the content string
    events = transcript_events("Write the report.", [answered(args)])
    arguments = tool_call(events[-1])["arguments"]
    assert arguments["path"] == "report.md" and content.startswith(arguments["content"][:-1])
    assert arguments["content"].endswith("…")


def test_arguments_that_are_not_json_are_kept_as_text_in_an_object():
    events = transcript_events("Patch it.", [answered("*** Begin Patch\n...")])
    assert tool_call(events[-1])["arguments"] == {"input": "*** Begin Patch\n..."}


def test_calls_that_failed_or_carry_no_digest_are_left_out_and_ids_keep_counting():
    calls = [answered('{"path": "a"}'), {"status": "error"}, {"status": "ok"},
             {"status": "ok", "digest": {"text": "", "results": [{"tool": "write", "text": "ok"}],
                                         "calls": [{"name": "write", "args": '{"path": "b"}'}]}}]
    events = transcript_events("Go.", calls)
    roles = [e["message"]["role"] for e in events[1:]]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert events[3]["message"]["toolCallId"] == "call_1" and tool_call(events[4])["id"] == "call_2"
