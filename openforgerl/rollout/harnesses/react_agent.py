"""forge-react: the reference harness, a minimal ReAct loop over the openai SDK.

It runs *inside* the sandbox, standalone (stdlib + openai only; ``forge harness install react``
copies this file next to the SDK). Tools: shell, read_file, write_file, finish. The loop ends
when the model calls ``finish``, answers without a tool call, or ``--max-turns`` is reached.
Invariant: every model call goes to ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY`` (the proxy and the
rollout's token); the agent keeps no hidden state outside the messages it sends.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SYSTEM = ("You are an agent working in a Linux shell. Use the tools to complete the task, "
          "then call finish.")
OUTPUT_LIMIT = 8000

TOOLS = [
    {"type": "function", "function": {
        "name": "shell", "description": "Run a bash command and return its exit code and output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Write text to a file (empty without content), creating parent directories.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "finish", "description": "Stop: the task is done.",
        "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": []}}},
]


def shell(command: str, timeout: float) -> str:
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    return f"exit code {done.returncode}\n{(done.stdout + done.stderr)[-OUTPUT_LIMIT:]}"


def read_file(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")[-OUTPUT_LIMIT:]
    except OSError as exc:
        return f"error: {exc}"


def write_file(path: str, content: str) -> str:
    try:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    except OSError as exc:
        return f"error: {exc}"
    return f"wrote {len(content)} characters to {path}"


def call_tool(name: str, raw_arguments: str, shell_timeout: float) -> tuple[str, bool]:
    """Run one tool call; returns (observation, finished). Bad calls are observations, not crashes."""
    try:
        args = json.loads(raw_arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
    except ValueError as exc:
        return f"error: arguments are not valid JSON: {exc}", False
    try:
        if name == "shell":
            return shell(str(args["command"]), shell_timeout), False
        if name == "read_file":
            return read_file(str(args["path"])), False
        if name == "write_file":
            return write_file(str(args["path"]), str(args.get("content", ""))), False
        if name == "finish":
            return str(args.get("message", "done")), True
    except KeyError as exc:
        return f"error: missing argument {exc}", False
    return f"error: unknown tool {name!r}; tools: shell, read_file, write_file, finish", False


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="forge-react", description=__doc__.splitlines()[0])
    parser.add_argument("instruction", nargs="?", help="the task (or --instruction-file)")
    parser.add_argument("--instruction-file")
    parser.add_argument("--model", default=os.environ.get("FORGE_MODEL", "policy"))
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--tool-choice", default="auto",
                        help="auto | required (small models need required) | a tool name (that tool every turn)")
    parser.add_argument("--shell-timeout", type=float, default=120.0)
    parser.add_argument("--log", help="write the final messages as JSON here")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    from openai import OpenAI  # imported late so --help works without the SDK

    instruction = Path(args.instruction_file).read_text() if args.instruction_file else args.instruction
    if not instruction:
        print("forge-react: give an instruction or --instruction-file", file=sys.stderr)
        return 2
    client = OpenAI(max_retries=0, timeout=600)
    names = [tool["function"]["name"] for tool in TOOLS]
    tool_choice = ({"type": "function", "function": {"name": args.tool_choice}} if args.tool_choice in names
                   else args.tool_choice)
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instruction}]
    try:
        for turn in range(args.max_turns):
            reply = client.chat.completions.create(
                model=args.model, messages=messages, tools=TOOLS, tool_choice=tool_choice,
                max_tokens=args.max_tokens, temperature=args.temperature).choices[0].message
            messages.append(reply.model_dump(exclude_none=True, exclude={"refusal", "annotations", "audio"}))
            print(f"[turn {turn}] {reply.content or ''}".rstrip(), flush=True)
            if not reply.tool_calls:
                return 0
            for call in reply.tool_calls:
                observation, finished = call_tool(call.function.name, call.function.arguments, args.shell_timeout)
                print(f"  {call.function.name}({call.function.arguments[:200]}) -> {observation[:200]}", flush=True)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": observation})
                if finished:
                    return 0
        print(f"forge-react: no finish after {args.max_turns} turns", file=sys.stderr)
        return 3
    finally:
        if args.log:
            Path(args.log).parent.mkdir(parents=True, exist_ok=True)
            Path(args.log).write_text(json.dumps(messages, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
