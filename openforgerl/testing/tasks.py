"""Task directories for tests: one builder, with the hello-file task as every default.

``write_task(root)`` writes ``root/hello``: the agent must create ``/app/hello.txt`` containing
``hi``; ``tests/test.sh`` writes reward 1 exactly then (else 0) and ``solution/solve.sh`` does it.
Every part can be replaced (``test_sh=...``), left out (``solution=None``), or the whole task.toml
given verbatim (``toml=...``). Invariant: what it writes loads with ``Task.load`` unless the caller
passes a broken ``toml`` on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

BASE_DOCKERFILE = "FROM openforgerl/base:bookworm\nRUN mkdir -p /app\nWORKDIR /app\n"
HELLO_INSTRUCTION = "Create the file /app/hello.txt containing hi.\n"
HELLO_TEST_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    '[ "$(cat /app/hello.txt 2>/dev/null)" = hi ] && r=1 || r=0\n'
    'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n'
)
HELLO_SOLUTION = "#!/bin/bash\necho hi > /app/hello.txt\n"


def write_task(root: Path, name: str = "hello", toml: str | None = None, *,
               instruction: str = HELLO_INSTRUCTION, test_sh: str | None = HELLO_TEST_SH,
               solution: str | None = HELLO_SOLUTION, dockerfile: str | None = BASE_DOCKERFILE,
               domain: str = "claw", agent_timeout: float = 60, verifier_timeout: float | None = None,
               image: str | None = None, environment: dict[str, Any] | None = None,
               tables: dict[str, dict[str, Any]] | None = None) -> Path:
    """Write a task directory ``root/name`` and return its path.

    ``image`` pins ``[environment] docker_image``; ``environment`` adds other ``[environment]``
    keys (``memory_mb``, ``template``...); ``tables`` adds or extends any other table."""
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(toml if toml is not None else _task_toml(
        name, domain, agent_timeout, verifier_timeout, image, environment or {}, tables or {}))
    (task / "instruction.md").write_text(instruction)
    for path, text in (("environment/Dockerfile", dockerfile), ("tests/test.sh", test_sh),
                       ("solution/solve.sh", solution)):
        if text is not None:
            (task / path).write_text(text)
    return task


def _task_toml(name: str, domain: str, agent_timeout: float, verifier_timeout: float | None, image: str | None,
               environment: dict[str, Any], tables: dict[str, dict[str, Any]]) -> str:
    data: dict[str, dict[str, Any]] = {"task": {"name": name, "domain": domain},
                                       "agent": {"timeout_sec": agent_timeout}}
    if verifier_timeout is not None:
        data["verifier"] = {"timeout_sec": verifier_timeout}
    env = {**({"docker_image": image} if image else {}), **environment}
    if env:
        data["environment"] = env
    for table, values in tables.items():
        data[table] = {**data.get(table, {}), **values}
    return tomli_w.dumps(data)
