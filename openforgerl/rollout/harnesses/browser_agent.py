"""forge-browser: the gui harness, a tool-calling loop that drives Debian's Chromium through Playwright.

It runs *inside* the sandbox, standalone (stdlib + playwright; ``forge harness install browser``
copies this file next to the library). Each turn the model sees the page as its accessibility tree,
one numbered line per element (plus a screenshot as an image part with ``--vision``), and answers
with one action: click, type, scroll, key, goto or done, addressing elements by their [ref] number.
Invariants: every model call goes to ``$OPENAI_BASE_URL/chat/completions`` with ``$OPENAI_API_KEY``
(the proxy and the rollout's token), history is only ever appended to, and the browser reaches
loopback hosts only (other requests are aborted; the flags keep Chromium's own traffic off).
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

SYSTEM = ("You control a web browser to complete a task. Each observation shows the page's URL, title "
          "and accessibility tree; elements are numbered like [3]. Call exactly one tool per turn, "
          "addressing elements by their number. Call done when the task is complete.")
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  # Only loopback resolves (IP literals included), anything else would go to a dead loopback
                  # proxy (loopback itself always bypasses it) and WebRTC gets no UDP of its own: nothing
                  # Chromium starts leaves the machine, even with the host's network.
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.*, EXCLUDE ::1",
                  "--proxy-server=http://127.0.0.1:9", "--force-webrtc-ip-handling-policy=disable_non_proxied_udp")
TREE_LIMIT = 6000
"""Characters of accessibility tree per observation; the rest is cut with a note to scroll."""
SCROLL_PIXELS = 600

_REF_PROPERTY = {"type": "integer", "description": "the element's number, e.g. 3 for [3]"}
TOOLS = [
    {"type": "function", "function": {
        "name": "click", "description": "Click an element.",
        "parameters": {"type": "object", "properties": {"ref": _REF_PROPERTY}, "required": ["ref"]}}},
    {"type": "function", "function": {
        "name": "type", "description": ("Replace the text of an input field, or choose a drop-down's option "
                                         "by its label; submit=true presses Enter after."),
        "parameters": {"type": "object", "properties": {
            "ref": _REF_PROPERTY, "text": {"type": "string"}, "submit": {"type": "boolean"}},
            "required": ["ref", "text"]}}},
    {"type": "function", "function": {
        "name": "scroll", "description": "Scroll the page up or down.",
        "parameters": {"type": "object", "properties": {
            "direction": {"type": "string", "enum": ["up", "down"]}, "pixels": {"type": "integer"}},
            "required": ["direction"]}}},
    {"type": "function", "function": {
        "name": "key", "description": "Press a key or chord on the focused element, e.g. Enter, Tab, Control+A.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}},
    {"type": "function", "function": {
        "name": "goto", "description": "Open a URL (relative ones resolve against the current page).",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}},
    {"type": "function", "function": {
        "name": "done", "description": "Stop: the task is complete.",
        "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": []}}},
]
ACTIONS = tuple(tool["function"]["name"] for tool in TOOLS)


class ActionError(ValueError):
    """A tool call the agent cannot carry out; its message goes back to the model as the observation."""


@dataclass(frozen=True)
class Action:
    name: str
    ref: int | None = None
    text: str = ""
    submit: bool = False
    direction: str = "down"
    pixels: int = SCROLL_PIXELS
    key: str = ""
    url: str = ""
    message: str = ""


@dataclass(frozen=True)
class Target:
    """How Playwright finds the element behind a [ref]: the nth element with this role (and name)."""

    role: str
    name: str | None
    nth: int


# ---------------------------------------------------------------- actions (pure)

def parse_action(name: str, raw_arguments: str | None) -> Action:
    """A model's tool call -> Action; raises ActionError saying what is wrong with it."""
    if name not in ACTIONS:
        raise ActionError(f"unknown action {name!r}; actions: {', '.join(ACTIONS)}")
    try:
        args = json.loads(raw_arguments or "{}")
    except ValueError as exc:
        raise ActionError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ActionError("arguments must be a JSON object")
    return _build_action(name, args)


def _build_action(name: str, args: dict[str, Any]) -> Action:
    if name == "click":
        return Action(name, ref=_ref(args))
    if name == "type":
        return Action(name, ref=_ref(args), text=_required_text(args, "text"), submit=_flag(args.get("submit")))
    if name == "scroll":
        direction = str(args.get("direction", "down")).lower()
        if direction not in ("up", "down"):
            raise ActionError(f"direction must be up or down, not {direction!r}")
        return Action(name, direction=direction, pixels=_pixels(args.get("pixels")))
    if name == "key":
        return Action(name, key=_required_text(args, "key"))
    if name == "goto":
        return Action(name, url=_required_text(args, "url"))
    return Action(name, message=str(args.get("message", "")))


def _ref(args: dict[str, Any]) -> int:
    """Small models write 3, "3" or "[3]"; all mean element [3]."""
    if "ref" not in args:
        raise ActionError("missing argument 'ref' (the element's number)")
    raw = args["ref"]
    if isinstance(raw, bool):
        raise ActionError(f"ref must be an element number, not {raw!r}")
    found = re.fullmatch(r"\s*\[?\s*(\d+)\s*\]?\s*", str(raw))
    if not found:
        raise ActionError(f"ref must be an element number like 3, not {raw!r}")
    return int(found.group(1))


def _required_text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value) == "":
        raise ActionError(f"missing argument {key!r}")
    return str(value)


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "yes", "1"))


def _pixels(value: Any) -> int:
    try:
        return max(1, min(int(value), 10_000)) if value is not None else SCROLL_PIXELS
    except (TypeError, ValueError) as exc:
        raise ActionError(f"pixels must be a number, not {value!r}") from exc


def allowed_url(url: str) -> bool:
    """Only loopback hosts (127.0.0.0/8, ::1, localhost) and local schemes are ever loaded."""
    parts = urlsplit(url)
    if parts.scheme in ("about", "data", "blob"):
        return True
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
        return False
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_url(current: str, url: str) -> str:
    """The URL a goto opens: relative to the current page, refused unless it is loopback."""
    target = urljoin(current, url.strip()) if current.startswith("http") else url.strip()
    if not allowed_url(target):
        raise ActionError(f"{url!r} is not reachable: only loopback hosts (127.0.0.1, localhost) are")
    return target


# ---------------------------------------------------------------- observations (pure)

_TREE_LINE = re.compile(r'^(?P<indent>\s*)- (?P<role>[a-z][a-z-]*)(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<rest>.*)$')
_UNADDRESSABLE = ("text",)


def number_tree(aria_snapshot: str) -> tuple[str, dict[int, Target]]:
    """Playwright's aria snapshot -> the lines the model reads ('[3] button "Submit"') and what each
    ref points at: its role, accessible name, and which match it is in document order."""
    lines, targets = [], {}
    named: dict[tuple[str, str], int] = {}
    by_role: dict[str, int] = {}
    for raw in aria_snapshot.splitlines():
        found = _TREE_LINE.match(_unquote_key(raw))
        if not found or found["role"] in _UNADDRESSABLE:
            lines.append(raw.replace("- ", "", 1))
            continue
        role, name = found["role"], _unescape(found["name"])
        # get_by_role(role, name=..., exact=True) counts same-named elements; without a name, all of the role.
        nth = named.get((role, name), 0) if name is not None else by_role.get(role, 0)
        if name is not None:
            named[(role, name)] = nth + 1
        by_role[role] = by_role.get(role, 0) + 1
        targets[len(targets) + 1] = Target(role, name, nth)
        label = f' "{found["name"]}"' if found["name"] is not None else ""
        rest = found["rest"][:-1] if found["rest"].endswith(":") else found["rest"]  # children follow
        lines.append(f"{found['indent']}[{len(targets)}] {role}{label}{rest}")
    return "\n".join(lines), targets


def _unquote_key(line: str) -> str:
    """YAML quotes a line's key when it holds ': ' or the like: - 'link "a: b"' -> - link "a: b"."""
    found = re.match(r"^(\s*)- '(.*)'(:.*)?$", line)
    if not found:
        return line
    return f"{found[1]}- {found[2].replace(chr(39) * 2, chr(39))}{found[3] or ''}"


def _unescape(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        return json.loads(f'"{name}"')
    except ValueError:
        return name


def format_observation(url: str, title: str, tree: str, limit: int = TREE_LIMIT) -> str:
    if len(tree) > limit:
        cut = tree[:limit].rsplit("\n", 1)[0]
        hidden = tree.count("\n") - cut.count("\n")
        tree = f"{cut}\n... ({hidden} more lines: scroll or act on what is shown)"
    return (f"URL: {url}\nTitle: {title}\n"
            f"Page (accessibility tree; act on elements by their [number]):\n{tree or '(empty page)'}")


def user_content(text: str, screenshot_png: bytes | None) -> str | list[dict[str, Any]]:
    """Text alone, or text plus the screenshot as an image part (for models that take images)."""
    if screenshot_png is None:
        return text
    data = base64.b64encode(screenshot_png).decode()
    return [{"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]


def tool_results(outcomes: list[tuple[str, str]], observation: str | None,
                 screenshot_png: bytes | None = None) -> list[dict[str, Any]]:
    """Messages answering one assistant turn: a tool result per call (the last one carrying the new
    observation), then, with a screenshot, a user message holding it (tool results take only text)."""
    messages: list[dict[str, Any]] = []
    for i, (call_id, outcome) in enumerate(outcomes):
        last = i == len(outcomes) - 1
        content = f"{outcome}\n\n{observation}" if last and observation else outcome
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    if screenshot_png is not None:
        messages.append({"role": "user", "content": user_content("Screenshot of the page now.", screenshot_png)})
    return messages


def loggable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with screenshots replaced by their size, for the run log."""
    def shrink(part: Any) -> Any:
        if isinstance(part, dict) and part.get("type") == "image_url":
            return {"type": "image_url", "image_url": {"url": f"<png, {len(part['image_url']['url'])} chars>"}}
        return part

    return [{**m, "content": [shrink(p) for p in m["content"]]} if isinstance(m.get("content"), list) else m
            for m in messages]


# ---------------------------------------------------------------- the browser (Playwright)

class Browser:
    """One Chromium page; every action returns a short outcome text or raises ActionError."""

    def __init__(self, chromium: str, viewport: tuple[int, int], action_timeout_ms: int) -> None:
        from playwright.sync_api import sync_playwright  # late: --help works without the library

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=chromium, headless=True,
                                                         args=list(CHROMIUM_FLAGS))
        context = self._browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                            service_workers="block")
        context.route("**/*", self._guard)
        self.page = context.new_page()
        self.page.set_default_timeout(action_timeout_ms)
        self.targets: dict[int, Target] = {}

    @staticmethod
    def _guard(route: Any) -> None:
        if allowed_url(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()

    def observe(self, screenshot: bool) -> tuple[str, bytes | None]:
        self._settle()
        text, self.targets = number_tree(self.page.locator("body").aria_snapshot())
        observation = format_observation(self.page.url, self.page.title(), text)
        return observation, (self.page.screenshot(type="png") if screenshot else None)

    def _settle(self) -> None:
        try:
            self.page.wait_for_load_state("load", timeout=10_000)
        except Exception:  # a page that never finishes loading is still observed as it is
            pass

    def locate(self, ref: int | None) -> Any:
        if ref not in self.targets:
            known = f"1-{len(self.targets)}" if self.targets else "none on this page"
            raise ActionError(f"there is no element [{ref}] (elements: {known})")
        target = self.targets[ref]
        if target.name is None:
            return self.page.get_by_role(target.role).nth(target.nth)
        return self.page.get_by_role(target.role, name=target.name, exact=True).nth(target.nth)

    def act(self, action: Action) -> str:
        from playwright.sync_api import Error as PlaywrightError

        try:
            return self._act(action)
        except PlaywrightError as exc:
            raise ActionError(f"{action.name} failed: {str(exc).splitlines()[0]}") from exc

    def _act(self, action: Action) -> str:
        if action.name == "click":
            element = self.locate(action.ref)
            if _tag(element) == "OPTION":  # clicking a drop-down's option means choosing it
                label = element.evaluate("e => e.label.trim()")
                element.locator("xpath=ancestor::select[1]").select_option(label=label)
                return f"chose {label!r} ([{action.ref}])"
            element.click()
            return f"clicked [{action.ref}]"
        if action.name == "type":
            element = self.locate(action.ref)
            if _tag(element) == "SELECT":
                return _choose(element, action)
            element.fill(action.text)
            if action.submit:
                element.press("Enter")
            return f"typed {action.text!r} into [{action.ref}]" + (" and pressed Enter" if action.submit else "")
        if action.name == "scroll":
            self.page.mouse.wheel(0, action.pixels if action.direction == "down" else -action.pixels)
            return f"scrolled {action.direction} {action.pixels} pixels"
        if action.name == "key":
            self.page.keyboard.press(action.key)
            return f"pressed {action.key}"
        if action.name == "goto":
            url = resolve_url(self.page.url, action.url)
            self.page.goto(url)
            return f"opened {url}"
        return action.message or "done"


def _tag(element: Any) -> str:
    return element.evaluate("e => e.tagName")


def _choose(element: Any, action: Action) -> str:
    labels = element.evaluate("e => Array.from(e.options, o => o.label.trim())")
    if action.text not in labels:
        raise ActionError(f"[{action.ref}] has no option {action.text!r}; its options: {', '.join(map(repr, labels))}")
    element.select_option(label=action.text)
    return f"chose {action.text!r} in [{action.ref}]"


# ---------------------------------------------------------------- the model (the proxy)

class ModelError(RuntimeError):
    """The endpoint refused or failed a call; the run ends (there is nothing to act on)."""


def chat(base_url: str, api_key: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One OpenAI chat completion over plain HTTP -> the reply message."""
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json",
                                              "authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        raise ModelError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}") from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"{type(exc).__name__}: {exc}") from exc
    try:
        return answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ModelError(f"unexpected answer: {str(answer)[:500]}") from exc


def assistant_turn(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply as it goes back into the history: exactly what the endpoint returned, minus extras."""
    turn: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        turn["tool_calls"] = reply["tool_calls"]
    return turn


# ---------------------------------------------------------------- the loop

def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="forge-browser", description=__doc__.splitlines()[0])
    parser.add_argument("instruction", nargs="?", help="the task (or --instruction-file)")
    parser.add_argument("--instruction-file")
    parser.add_argument("--start-url", help="the page to open first")
    parser.add_argument("--start-url-file", help="a file holding the page to open first (the gui image's "
                                                 "/run/forge-webapp/url); --start-url wins")
    parser.add_argument("--model", default=os.environ.get("FORGE_MODEL", "policy"))
    parser.add_argument("--vision", action="store_true", help="send screenshots as image parts too")
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--tool-choice", default="auto", help="auto | required (small models need required)")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
    parser.add_argument("--viewport", default="1024x768", help="WIDTHxHEIGHT")
    parser.add_argument("--action-timeout", type=float, default=5.0, help="seconds per browser action")
    parser.add_argument("--model-timeout", type=float, default=600.0, help="seconds per model call")
    parser.add_argument("--log", help="write the final messages as JSON here (screenshots left out)")
    parser.add_argument("--screenshot-dir", help="save the screenshot of every step here")
    return parser.parse_args(argv)


def start_url(args: argparse.Namespace) -> str:
    if args.start_url:
        return args.start_url
    if args.start_url_file and Path(args.start_url_file).is_file():
        return Path(args.start_url_file).read_text().strip()
    return "about:blank"


def viewport(text: str) -> tuple[int, int]:
    width, _, height = text.lower().partition("x")
    return int(width), int(height)


class Run:
    """One episode: the messages so far, the browser, and the model endpoint."""

    def __init__(self, args: argparse.Namespace, browser: Browser) -> None:
        self.args = args
        self.browser = browser
        self.messages: list[dict[str, Any]] = []
        self.step = 0
        self.base_url = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8321/v1")
        self.api_key = os.environ.get("OPENAI_API_KEY", "")

    def observe(self) -> tuple[str, bytes | None]:
        observation, png = self.browser.observe(screenshot=self.args.vision or bool(self.args.screenshot_dir))
        if png is not None and self.args.screenshot_dir:
            Path(self.args.screenshot_dir).mkdir(parents=True, exist_ok=True)
            (Path(self.args.screenshot_dir) / f"step-{self.step:03d}.png").write_bytes(png)
        self.step += 1
        return observation, (png if self.args.vision else None)

    def ask(self) -> dict[str, Any]:
        body = {"model": self.args.model, "messages": self.messages, "tools": TOOLS,
                "tool_choice": self.args.tool_choice, "max_tokens": self.args.max_tokens,
                "temperature": self.args.temperature}
        reply = chat(self.base_url, self.api_key, body, self.args.model_timeout)
        self.messages.append(assistant_turn(reply))
        return reply

    def play(self, instruction: str, url: str) -> int:
        opened = self.browser.act(Action("goto", url=url)) if url != "about:blank" else ""
        observation, png = self.observe()
        self.messages = [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": user_content(f"{instruction.strip()}\n\n{observation}", png)}]
        print(f"[start] {opened or 'about:blank'}", flush=True)
        for turn in range(self.args.max_turns):
            reply = self.ask()
            print(f"[turn {turn}] {reply.get('content') or ''}".rstrip(), flush=True)
            if not reply.get("tool_calls"):
                return 0
            if self.act(reply["tool_calls"]):
                return 0
        print(f"forge-browser: no done after {self.args.max_turns} turns", file=sys.stderr)
        return 3

    def act(self, calls: list[dict[str, Any]]) -> bool:
        """Carry out one turn's calls in order; True once one of them is done."""
        outcomes, finished = [], False
        for call in calls:
            function = call.get("function") or {}
            outcome, finished = self.carry_out(function.get("name", ""), function.get("arguments"))
            print(f"  {function.get('name')}({str(function.get('arguments'))[:200]}) -> {outcome[:200]}", flush=True)
            outcomes.append((call.get("id", ""), outcome))
            if finished:
                break
        for call in calls[len(outcomes):]:  # every call gets an answer, even after done
            outcomes.append((call.get("id", ""), "skipped: the task was already done"))
        observation, png = (None, None) if finished else self.observe()
        self.messages += tool_results(outcomes, observation, png)
        return finished

    def carry_out(self, name: str, raw_arguments: str | None) -> tuple[str, bool]:
        try:
            action = parse_action(name, raw_arguments)
            return self.browser.act(action), action.name == "done"
        except ActionError as exc:
            return f"error: {exc}", False


def run(args: argparse.Namespace) -> int:
    instruction = Path(args.instruction_file).read_text() if args.instruction_file else args.instruction
    if not instruction:
        print("forge-browser: give an instruction or --instruction-file", file=sys.stderr)
        return 2
    browser = Browser(args.chromium, viewport(args.viewport), int(args.action_timeout * 1000))
    episode = Run(args, browser)
    try:
        return episode.play(instruction, start_url(args))
    except ModelError as exc:
        print(f"forge-browser: model call failed: {exc}", file=sys.stderr)
        return 4
    except ActionError as exc:  # only the start page gets here: later errors are observations
        print(f"forge-browser: cannot open the start page: {exc}", file=sys.stderr)
        return 5
    finally:
        browser.close()
        if args.log:
            Path(args.log).parent.mkdir(parents=True, exist_ok=True)
            Path(args.log).write_text(json.dumps(loggable(episode.messages), indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
