"""Checks for the guides in ``docs/``: their fenced blocks, and that every ``forge`` command they show
names a real command with real options (shared by the docs tests)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
OPERATORS = {"|", "||", "&", "&&", ";", "(", ")"}


def blocks(guide: Path, language: str) -> list[str]:
    """The bodies of the fenced blocks of ``guide`` in ``language``."""
    return [body for lang, body in FENCE.findall(guide.read_text(encoding="utf-8")) if lang == language]


def forge_commands(guide: Path) -> list[list[str]]:
    """Every `forge ...` command of the bash blocks, as argv after `forge` (continuations joined, comments
    dropped, pipelines and lists split, leading VAR=value assignments skipped)."""
    commands = []
    for body in blocks(guide, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            segment: list[str] = []
            for token in [*lexer, ";"]:
                if token not in OPERATORS:
                    segment.append(token)
                    continue
                while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
                    segment.pop(0)
                if segment and segment[0] == "forge":
                    commands.append(segment[1:])
                segment = []
    return commands


def resolve(argv: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """(subcommand path, the command it names, the tokens left for it); asserts each path step exists."""
    from openforgerl import cli as forge_cli

    forge_cli._register()
    command: click.Command = forge_cli.cli
    path: list[str] = []
    rest = list(argv)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = command.commands.get(name)
        assert sub is not None, f"forge {' '.join(path + [name])}: no such command"
        command, path = sub, path + [name]
    return path, command, rest


def check_forge_commands(guide: Path) -> int:
    """Assert every forge command of ``guide`` names a command (not a group) and only its options, and that
    ``--help`` of each works; returns how many commands were checked."""
    from click.testing import CliRunner

    from openforgerl import cli as forge_cli

    runner, commands = CliRunner(), forge_commands(guide)
    checked: set[tuple[str, ...]] = set()
    for argv in commands:
        path, command, rest = resolve(argv)
        assert not isinstance(command, click.Group), f"forge {' '.join(argv)}: names a group, not a command"
        options = {opt for param in command.get_params(click.Context(command)) for opt in
                   (*param.opts, *param.secondary_opts) if opt.startswith("-")}
        for token in rest:
            if token.startswith("-") and token != "-":
                name = token.split("=", 1)[0]
                assert name in options, f"forge {' '.join(argv)}: {name} is not an option of forge {' '.join(path)}"
        if tuple(path) not in checked:
            checked.add(tuple(path))
            result = runner.invoke(forge_cli.cli, [*path, "--help"])
            assert result.exit_code == 0, f"forge {' '.join(path)} --help: {result.output}"
    return len(commands)
