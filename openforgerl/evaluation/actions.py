"""What each tool call of a rollout did, in one vocabulary across harnesses.

Harnesses name their tools differently (codex ``exec_command`` / ``apply_patch``, Claude Code
``Bash`` / ``Edit`` / ``Read``, opencode ``bash`` / ``edit``, OpenClaw ``exec`` / ``write``,
mini-swe-agent ``bash``, our react ``shell`` / ``write_file``, the browser agent ``click`` / ``done``).
``actions(calls)`` turns a trajectory's recorded calls (their proxy digests) into ``Action``s, each
with the *kinds* of effect it had — ``write`` (changed a file), ``read``, ``list``, ``search``,
``test`` (ran tests), ``run`` (ran anything else), ``browse`` (acted on a page), ``observe``
(looked at one), ``plan``, ``finish`` — plus its target and whether its result was an error.

Invariant: classification reads only what the proxy recorded (names, arguments, the tool results
sent back on the next call), never a harness's own logs, so every harness is measured the same way.
A shell command is split at ``&&``, ``||``, ``;`` and ``|`` and each part classified in order, so
``echo hi > f && cat f`` is a write followed by a read.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

KINDS = ("write", "read", "list", "search", "test", "run", "browse", "observe", "plan", "finish", "other")
CHECK_KINDS = frozenset({"read", "list", "search", "test", "run", "observe"})
"""Kinds that look at the state of things: after a write, one of these is self-verification."""

SHELL_TOOLS = {"shell", "bash", "Bash", "exec", "exec_command", "execute", "run_command", "terminal",
               "local_shell", "container.exec"}
COMMAND_KEYS = ("command", "cmd", "commands", "script")
PATH_KEYS = ("path", "file_path", "filePath", "file", "filename", "notebook_path", "target", "url", "pattern")
TOOL_KINDS: dict[str, str] = {
    # file tools of each harness (lower-cased names)
    "write_file": "write", "write": "write", "edit": "write", "multiedit": "write", "notebookedit": "write",
    "apply_patch": "write", "patch": "write", "str_replace_editor": "write", "create_file": "write",
    "read_file": "read", "read": "read", "view": "read", "cat": "read", "view_image": "observe",
    "ls": "list", "list": "list", "list_dir": "list", "glob": "list",
    "grep": "search", "search": "search", "web_search": "search", "websearch": "search",
    "webfetch": "read", "web_fetch": "read", "fetch": "read",
    "todowrite": "plan", "todoread": "plan", "update_plan": "plan", "todo": "plan",
    # the browser agent
    "click": "browse", "type": "browse", "key": "browse", "scroll": "observe", "goto": "observe",
    "screenshot": "observe",
    # declaring the work done
    "finish": "finish", "done": "finish", "submit": "finish", "task_complete": "finish", "attempt_completion": "finish",
}
FINISH_COMMANDS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
"""mini-swe-agent ends by echoing one of these."""

TEST_PROGRAMS = re.compile(r"^(pytest|py\.test|tox|nox|unittest|jest|vitest|mocha|ctest|rspec|phpunit)$")
TEST_PHRASES = re.compile(r"(-m\s+(pytest|unittest)\b|\b(npm|yarn|pnpm)\s+(run\s+)?test\b|\bmake\s+(test|check)\b|"
                          r"\b(go|cargo|dotnet|mvn|gradle)\s+test\b|\btest_\w*\.py\b|/tests?/\S*\.sh\b)")
READ_PROGRAMS = {"cat", "head", "tail", "less", "more", "wc", "diff", "cmp", "stat", "file", "jq", "xxd", "od",
                 "md5sum", "sha256sum", "nl", "strings", "readlink", "sqlite3", "hexdump", "bat"}
LIST_PROGRAMS = {"ls", "tree", "find", "pwd", "du", "df", "realpath", "which", "whereis", "dir"}
SEARCH_PROGRAMS = {"grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep", "locate"}
WRITE_PROGRAMS = {"tee", "cp", "mv", "rm", "mkdir", "touch", "rmdir", "ln", "chmod", "chown", "truncate", "dd",
                  "patch", "install", "unzip", "tar"}
REDIRECT = re.compile(r"(?<![0-9&<>])(>>?|&>)\s*(?!&|/dev/null\b)([^\s;&|]+)")
ERROR_TEXT = re.compile(
    r"(^|\n)\s*(exit code|exit status|exited with code|returncode|return code)[\s:=\"]*[1-9]\d*\b|"
    r"Process exited with code [1-9]|<returncode>[1-9]\d*</returncode>|\"exit_code\"\s*:\s*[1-9]|"
    r"Traceback \(most recent call last\)|(^|\n)\s*(error|Error|ERROR)\b[:\s]|"
    r"command not found|No such file or directory|Permission denied|is_error\"?\s*:\s*true|"
    r"(^|\n)\s*\w*(Error|Exception):", re.IGNORECASE)
SUCCESS_EXIT = re.compile(r"(exit code|exit status|exited with code|returncode)[\s:=\"]*0\b|<returncode>0<",
                          re.IGNORECASE)


@dataclass
class Action:
    """One tool call: what it was, what it touched, what came back."""

    call: int
    """Index of the model call that made it."""
    tool: str
    args: Any
    kinds: list[str] = field(default_factory=list)
    """Effects in the order they happened (a compound shell command has several)."""
    target: str = ""
    """What it acted on: a path, a URL, or the program a command ran."""
    result: str | None = None
    """The tool result sent back on the next model call; None when the rollout ended before one."""
    error: bool = False

    @property
    def key(self) -> str:
        """The call itself: tool and arguments, as compared when looking for repeated calls."""
        return self.tool + " " + json.dumps(self.args, sort_keys=True, default=str)

    @property
    def goal(self) -> tuple[str, str]:
        """What the call was trying to do: its main effect and target (a retry has the same goal)."""
        main = next((k for k in self.kinds if k != "run"), self.kinds[0] if self.kinds else "other")
        return main, self.target


def actions(calls: list[dict[str, Any]]) -> list[Action]:
    """Every tool call of a trajectory's ``calls`` (summary dicts with digests), with its result."""
    found: list[Action] = []
    pending: list[Action] = []
    for call in calls:
        digest = call.get("digest")
        if call.get("status") != "ok" or not digest:
            continue
        for action, result in zip(pending, digest.get("results", []), strict=False):
            action.result = result.get("text", "")
            action.error = is_error(action.result)
        pending = [classify(call.get("index", len(found)), c.get("name", ""), c.get("args", ""))
                   for c in digest.get("calls", [])]
        if not pending and digest.get("text"):
            pending = text_actions(call.get("index", len(found)), digest["text"])
        found += pending
    return found


def classify(index: int, tool: str, raw_args: Any) -> Action:
    args = parse_args(raw_args)
    command = _command(tool, args)
    if command is not None:
        kinds, target = shell_kinds(command)
        return Action(index, tool, args, kinds, target)
    kind = TOOL_KINDS.get(tool.lower().split(".")[-1], "other")
    return Action(index, tool, args, [kind], _target(args))


def text_actions(index: int, text: str) -> list[Action]:
    """A harness that answers in text (mini-swe-agent's classic mode): its fenced bash block is the call."""
    blocks = re.findall(r"```(?:bash|sh|shell)\s*\n(.*?)```", text, re.DOTALL)
    if len(blocks) != 1:
        return []
    kinds, target = shell_kinds(blocks[0].strip())
    return [Action(index, "bash", {"command": blocks[0].strip()}, kinds, target)]


def parse_args(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def shell_kinds(command: str) -> tuple[list[str], str]:
    """The kinds of a shell command's parts, in order, and the program or file it is about."""
    kinds, target = _shell_kinds(command)
    return list(kinds), target


@functools.lru_cache(maxsize=4096)  # agents repeat their commands: classify each text once
def _shell_kinds(command: str) -> tuple[tuple[str, ...], str]:
    if any(marker in command for marker in FINISH_COMMANDS):
        return ("finish",), ""
    kinds: list[str] = []
    target = ""
    for part in re.split(r"&&|\|\||;|\||\n", command):
        part = part.strip()
        if not part:
            continue
        kind, about = _part_kind(part)
        kinds.append(kind)
        target = target or about
    return tuple(kinds or ["run"]), target


def is_error(text: str | None) -> bool:
    """Whether a tool result says its call failed: a non-zero exit, an error message, an exception."""
    if not text:
        return False
    head = text[:600]
    if SUCCESS_EXIT.search(head) and not re.search(r"Traceback \(most recent call last\)", text):
        return False
    return bool(ERROR_TEXT.search(head))


def _part_kind(part: str) -> tuple[str, str]:
    redirect = REDIRECT.search(part)
    words = _words(part)
    program = _program(words)
    if re.search(r"\bsed\b.*\s-i", part) or program in ("cp", "mv", "ln", "install"):
        return "write", _first_path(words[:0:-1]) or program  # the file changed is the last argument
    if re.search(r"\bgit\s+(apply|checkout|restore|commit)\b", part):
        return "write", _first_path(words[1:]) or program
    if redirect or program in WRITE_PROGRAMS or (program == "python" and "open(" in part and "'w'" in part):
        return "write", redirect.group(2) if redirect else (_first_path(words[1:]) or program)
    if TEST_PROGRAMS.match(program) or TEST_PHRASES.search(part):
        return "test", program
    if program in SEARCH_PROGRAMS:
        return "search", _first_path(words[1:]) or program
    if program in READ_PROGRAMS:
        return "read", _first_path(words[1:]) or program
    if program in LIST_PROGRAMS:
        return "list", _first_path(words[1:]) or program
    if program in ("cd", "export", "set", "source", "true", ":", ""):
        return "other", ""
    return "run", program


def _words(part: str) -> list[str]:
    if not any(c in part for c in "'\"\\"):
        return part.split()  # what shlex would give, without its cost
    try:
        return shlex.split(part, comments=False)
    except ValueError:
        return part.split()


def _program(words: list[str]) -> str:
    """The program a command part runs, past ``sudo``, ``env X=1``, ``timeout 5`` and interpreters' paths."""
    rest = list(words)
    while rest and (rest[0] in ("sudo", "env", "timeout", "time", "nohup", "exec", "command")
                    or "=" in rest[0] or rest[0].replace(".", "").isdigit()):
        rest.pop(0)
    if not rest:
        return ""
    program = rest[0].rsplit("/", 1)[-1]
    return "python" if re.match(r"python[0-9.]*$", program) else program


def _first_path(words: list[str]) -> str:
    return next((w for w in words if not w.startswith("-") and ("/" in w or "." in w)), "")


def _command(tool: str, args: Any) -> str | None:
    if tool not in SHELL_TOOLS and tool.lower() not in {t.lower() for t in SHELL_TOOLS}:
        return None
    if isinstance(args, str):
        return args
    if isinstance(args, dict):
        for key in COMMAND_KEYS:
            value = args.get(key)
            if isinstance(value, list):  # codex's shell tool: ["bash", "-lc", "..."]
                return value[-1] if value and value[0] in ("bash", "sh") else " ".join(map(str, value))
            if isinstance(value, str):
                return value
    return ""


def _target(args: Any) -> str:
    patch = args if isinstance(args, str) else args.get("input") if isinstance(args, dict) else None
    if isinstance(patch, str) and "*** " in patch:  # apply_patch's patch text names the file it changes
        found = re.search(r"\*\*\* (?:Update|Add|Delete) File: (\S+)", patch)
        return found.group(1) if found else ""
    if isinstance(args, dict):
        for key in PATH_KEYS:
            if isinstance(args.get(key), str):
                return args[key]
        if "selector" in args or "ref" in args:
            return str(args.get("selector") or args.get("ref"))
    return ""
