"""forge-browser's pure parts: what a model's tool call means, and what the model is shown."""

from __future__ import annotations

import base64
import json

import pytest

from openforgerl.rollout.harnesses.browser_agent import (
    ACTIONS,
    TOOLS,
    Action,
    ActionError,
    Target,
    allowed_url,
    format_observation,
    loggable,
    number_tree,
    parse_action,
    parse_args,
    resolve_url,
    tool_results,
    user_content,
)

FORM_SNAPSHOT = """\
- heading "Newsletter" [level=1]
- text: Name
- textbox "Name": Ada
- button "Subscribe"
- button "Subscribe" [disabled]
- link "Help":
  - /url: /help.html
- list:
  - listitem: one
  - listitem: two
- checkbox "Keep me \\"posted\\"" [checked]
- 'link "Terms: the fine print"':
  - /url: /terms.html"""


def test_every_tool_offered_to_the_model_is_an_action_it_can_take():
    assert ACTIONS == ("click", "type", "scroll", "key", "goto", "done")
    assert all(tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object" for tool in TOOLS)


@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("click", '{"ref": 3}', Action("click", ref=3)),
    ("click", '{"ref": "3"}', Action("click", ref=3)),
    ("click", '{"ref": "[12]"}', Action("click", ref=12)),
    ("type", '{"ref": 2, "text": "Ada Lovelace"}', Action("type", ref=2, text="Ada Lovelace")),
    ("type", '{"ref": 2, "text": "x", "submit": "true"}', Action("type", ref=2, text="x", submit=True)),
    ("type", '{"ref": 2, "text": 42}', Action("type", ref=2, text="42")),
    ("scroll", '{"direction": "UP", "pixels": 200}', Action("scroll", direction="up", pixels=200)),
    ("scroll", "{}", Action("scroll", direction="down")),
    ("key", '{"key": "Enter"}', Action("key", key="Enter")),
    ("goto", '{"url": "/about.html"}', Action("goto", url="/about.html")),
    ("done", None, Action("done")),
    ("done", '{"message": "subscribed"}', Action("done", message="subscribed")),
])
def test_tool_calls_become_actions_with_lenient_refs(name, arguments, expected):
    assert parse_action(name, arguments) == expected


@pytest.mark.parametrize(("name", "arguments", "complaint"), [
    ("hover", "{}", "unknown action 'hover'; actions: click, type"),
    ("click", "{ref: 3", "not valid JSON"),
    ("click", "[3]", "must be a JSON object"),
    ("click", "{}", "missing argument 'ref'"),
    ("click", '{"ref": "the button"}', "element number like 3"),
    ("click", '{"ref": true}', "element number"),
    ("type", '{"ref": 2}', "missing argument 'text'"),
    ("scroll", '{"direction": "left"}', "up or down"),
    ("scroll", '{"pixels": "lots"}', "pixels must be a number"),
    ("key", '{"key": ""}', "missing argument 'key'"),
])
def test_bad_tool_calls_say_what_is_wrong(name, arguments, complaint):
    with pytest.raises(ActionError, match=complaint.replace("(", r"\(")):
        parse_action(name, arguments)


def test_tree_lines_get_numbers_that_point_at_the_right_element():
    text, targets = number_tree(FORM_SNAPSHOT)
    assert text.splitlines() == [
        '[1] heading "Newsletter" [level=1]',
        "text: Name",
        '[2] textbox "Name": Ada',
        '[3] button "Subscribe"',
        '[4] button "Subscribe" [disabled]',
        '[5] link "Help"',
        "  /url: /help.html",
        "[6] list",
        "  [7] listitem: one",
        "  [8] listitem: two",
        '[9] checkbox "Keep me \\"posted\\"" [checked]',
        '[10] link "Terms: the fine print"',
        "  /url: /terms.html",
    ]
    assert targets[2] == Target("textbox", "Name", 0)
    assert (targets[3], targets[4]) == (Target("button", "Subscribe", 0), Target("button", "Subscribe", 1))
    assert (targets[7], targets[8]) == (Target("listitem", None, 0), Target("listitem", None, 1))
    assert targets[9] == Target("checkbox", 'Keep me "posted"', 0)
    assert targets[10] == Target("link", "Terms: the fine print", 0)
    # an unnamed match counts every element of its role, named ones included
    _, mixed = number_tree('- link "Help"\n- link')
    assert mixed[2] == Target("link", None, 1)


def test_observation_shows_where_the_page_is_and_cuts_a_long_tree():
    short = format_observation("http://127.0.0.1:8000/", "Sign up", '[1] button "Go"')
    assert short == ("URL: http://127.0.0.1:8000/\nTitle: Sign up\n"
                     'Page (accessibility tree; act on elements by their [number]):\n[1] button "Go"')
    long_tree = "\n".join(f"[{i}] link \"item {i}\"" for i in range(1, 1001))
    cut = format_observation("u", "t", long_tree, limit=200)
    assert len(cut) < 400 and cut.endswith("more lines: scroll or act on what is shown)")
    assert "[1] link" in cut and "[1000] link" not in cut
    assert format_observation("about:blank", "", "").endswith("(empty page)")


def test_screenshots_become_image_parts_only_in_vision_mode():
    assert user_content("look", None) == "look"
    parts = user_content("look", b"\x89PNG")
    assert parts[0] == {"type": "text", "text": "look"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()


def test_every_call_is_answered_and_the_last_answer_carries_the_new_page():
    text_mode = tool_results([("a", "typed 'Ada' into [2]"), ("b", "clicked [3]")], "URL: u")
    assert text_mode == [{"role": "tool", "tool_call_id": "a", "content": "typed 'Ada' into [2]"},
                         {"role": "tool", "tool_call_id": "b", "content": "clicked [3]\n\nURL: u"}]
    vision = tool_results([("a", "clicked [3]")], "URL: u", b"png")
    assert [m["role"] for m in vision] == ["tool", "user"]
    assert vision[1]["content"][1]["type"] == "image_url"
    assert tool_results([("a", "done")], None) == [{"role": "tool", "tool_call_id": "a", "content": "done"}]


def test_the_run_log_leaves_screenshots_out():
    messages = [{"role": "user", "content": user_content("look", b"x" * 3000)}, {"role": "assistant", "content": "ok"}]
    logged = json.dumps(loggable(messages))
    assert "look" in logged and "<png, " in logged and "eHh4" not in logged
    assert messages[0]["content"][1]["image_url"]["url"].startswith("data:")  # the history itself is untouched


@pytest.mark.parametrize(("url", "ok"), [
    ("http://127.0.0.1:8000/", True), ("http://127.5.6.7/x", True), ("http://localhost:3000", True),
    ("http://[::1]:8080/", True), ("about:blank", True), ("data:text/html,hi", True),
    ("https://example.com/", False), ("http://10.0.0.2/", False), ("http://169.254.169.254/latest", False),
    ("http://127.0.0.1.nip.io/", False), ("file:///etc/passwd", False), ("chrome://settings", False),
    ("ftp://127.0.0.1/", False),
])
def test_only_loopback_pages_are_ever_loaded(url, ok):
    assert allowed_url(url) is ok


def test_goto_resolves_relative_urls_and_refuses_outside_hosts():
    assert resolve_url("http://127.0.0.1:8000/a/b.html", "c.html") == "http://127.0.0.1:8000/a/c.html"
    assert resolve_url("about:blank", "http://localhost:9/") == "http://localhost:9/"
    with pytest.raises(ActionError, match="only loopback hosts"):
        resolve_url("http://127.0.0.1:8000/", "https://example.com/")
    with pytest.raises(ActionError, match="only loopback hosts"):
        resolve_url("http://127.0.0.1:8000/", "//example.com/x")


def test_defaults_are_text_only_and_use_debians_chromium(monkeypatch):
    monkeypatch.delenv("CHROMIUM_PATH", raising=False)
    args = parse_args(["do it"])
    assert (args.vision, args.chromium, args.tool_choice) == (False, "/usr/bin/chromium", "auto")
