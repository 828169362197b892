"""How each real harness CLI is driven to "create /app/hello.txt containing hi" by a scripted engine: the turn
that writes the file with the harness's *own* tool set (Codex's ``exec_command``, Claude Code's ``Write``,
opencode's and OpenClaw's ``write``, mini-swe-agent's ``bash`` tool or bash block), then the turn that ends.
Shared by the harness tests and ``bench/harness_memory.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TASK_TOML = '[task]\nname = "hello"\ndomain = "claw"\n\n[agent]\ntimeout_sec = 150\n'
DONE = {"text": "Done: /app/hello.txt contains hi."}
HELLO = "/app/hello.txt"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def shell(content: str) -> str:
    return f"printf %s {content} > {HELLO}"


def bash_block(command: str) -> dict[str, Any]:
    return {"text": f"Running it.\n\n```mswea_bash_command\n{command}\n```"}


@dataclass(frozen=True)
class Script:
    """How one harness is driven: the turn that writes ``content`` with its own tools, then the turn that ends."""

    harness: str
    dialect: str
    action: Callable[[str], dict[str, Any]]
    finish: dict[str, Any] = field(default_factory=lambda: DONE)
    options: dict[str, str] = field(default_factory=dict)

    def turns(self, content: str) -> list[dict[str, Any]]:
        return [self.action(content), self.finish]


SCRIPTS = [
    Script("codex", "responses", lambda c: tool("exec_command", cmd=shell(c))),
    Script("claude-code", "messages", lambda c: tool("Write", file_path=HELLO, content=c)),
    Script("opencode", "chat", lambda c: tool("write", filePath=HELLO, content=c)),
    Script("openclaw", "chat", lambda c: tool("write", path=HELLO, content=c)),
    Script("mini-swe-agent", "chat", lambda c: tool("bash", command=shell(c)), tool("bash", command=SUBMIT)),
]
VARIANTS = [
    Script("openclaw", "messages", SCRIPTS[3].action, options={"api": "anthropic-messages"}),
    Script("openclaw", "responses", SCRIPTS[3].action, options={"api": "openai-responses"}),
    Script("mini-swe-agent", "chat", lambda c: bash_block(shell(c)), bash_block(SUBMIT), {"mode": "textbased"}),
]
REACT = Script("react", "chat", lambda c: tool("write_file", path=HELLO, content=c),
               tool("finish", message="done"))
"""forge's own ReAct loop (its ``write_file`` and ``finish`` tools)."""
