"""Static quality checks of a task, run before anything is built, plus the one check that needs its image.

* ``instruction``: every file the verifier reads (a compiled spec's state paths, absolute paths in
  test.sh and the test files outside the system and harness directories) is named in instruction.md,
  so the agent can know what is checked.
* ``visibility``: neither tests/ nor solution/ reach the image: no COPY/ADD names them and no file in
  environment/ is a byte copy of one of theirs.
* ``hardcoded``: solve.sh does not write the reward, read /tests/ or paste a tests/ data file in.
* ``dependencies`` (image): every command test.sh (or a compiled spec) invokes, and every python
  module it runs, exists in the built image.

Invariant: a check never fails a task on a guess it cannot explain: each ``Finding`` names the file,
the evidence (the path, line or command) and the fix.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforgerl.errors import EnvBuildError
from openforgerl.tasks import INSTRUCTION, SOLUTION_SCRIPT, TEST_SCRIPT, Task

# Paths a verifier may touch that are not the agent's business (its own files, the system).
# /run and /var/log hold what the environment publishes or records (a service's address, the web
# app's request log): evidence for the verifier, not something the agent is asked to produce.
SYSTEM_PREFIXES = ("/logs/", "/tests/", "/solution/", "/dev/", "/proc/", "/sys/", "/usr/", "/bin/", "/sbin/",
                   "/lib/", "/etc/", "/tmp/", "/opt/forge/", "/run/", "/var/log/", "/var/lib/apt/")
SYSTEM_PATHS = {"/dev/null", "/tests", "/logs/verifier", "/solution", "/tmp", "/", "/app"}
SHELL_WORDS = set("""if then else elif fi for while until do done case esac in function select time
    ! { } [ [[ ]] ]] . : source true false echo printf read cd pwd test export local declare set unset
    return exit shift eval exec trap wait break continue let readonly type command builtin alias
    umask ulimit getopts hash kill jobs fg bg disown pushd popd dirs shopt mapfile readarray""".split())
# Two components at least (/app/out.txt): a lone /name is far more often a URL path or a closing tag.
ABS_PATH = re.compile(r"(?<![\w.$}<:/])(/(?:[\w.+-]+/)+[\w.+-]+)")
MIN_LEAK_BYTES = 16
RUN_SCRIPT = re.compile(r"\b(?:bash|sh|python3?|source)\s+(?:-\S+\s+)*(/[\w./+-]+)")
RUNNER_FILE = re.compile(r"forge_\w+\.py")  # the compiled verifier's runner modules (openforgerl.verifiers)
SPEC_FILE = "forge_verify.json"
INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b|\bpip3?\s+install\b|\|\s*(?:ba)?sh\b|"
                     r"\bnpm\s+(?:i|install)\b|\buv\s+(?:pip|tool)\s+install\b")


@dataclass
class Finding:
    """One failed check: which, what is wrong (with the evidence), and how to fix it."""

    check: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.check}: {self.what}; fix: {self.fix}"


def static_checks(task: Task) -> list[Finding]:
    return [*check_instruction(task), *check_visibility(task), *check_hardcoded(task)]


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


# ---- instruction mentions what the verifier checks ---------------------------------------------

def checked_paths(test_sh: str) -> list[str]:
    """Absolute paths in test.sh that belong to the task (not to the system or the verifier itself).

    Programs the verifier runs (``/opt/venv/bin/python``, ``bash /app/scripts/rebuild.sh``) are its
    tools, not the agent's output, so they are not counted.
    """
    tools = set(RUN_SCRIPT.findall(test_sh)) | {c for c in invoked_commands(test_sh) if c.startswith("/")}
    found = []
    for line in test_sh.splitlines():
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        for path in ABS_PATH.findall(code):
            path = path.rstrip(".")
            if path in SYSTEM_PATHS or path.startswith(SYSTEM_PREFIXES) or path in found or path in tools:
                continue
            found.append(path)
    # A directory that only holds checked files (cd /app) is not itself a thing to mention.
    return [p for p in found if not any(other.startswith(p + "/") for other in found)]


def verifier_text(task: Task) -> str:
    """test.sh and the verifier's own test files (pytest, scripts); not forge's compiled spec or runner."""
    parts = [_read(task.path / TEST_SCRIPT)]
    for path in sorted(task.tests_dir.rglob("*")) if task.tests_dir.is_dir() else []:
        if _is_test_source(path):
            parts.append(_read(path))
    return "\n".join(parts)


def _is_test_source(path: Path) -> bool:
    generated = path.name == SPEC_FILE or RUNNER_FILE.fullmatch(path.name)
    return (path.is_file() and path.name != "test.sh" and not generated and path.stat().st_size < 1 << 20
            and path.suffix in (".json", ".py", ".sh", ".yaml", ".yml", ".toml"))


def verifier_paths(task: Task) -> list[str]:
    """Task paths the verifier judges: from a compiled spec's footprint, and from test.sh / test files."""
    from openforgerl.verifiers import state_paths

    spec = _spec(task)
    from_spec = [p for p in state_paths(spec) if p not in SYSTEM_PATHS and not p.startswith(SYSTEM_PREFIXES)] \
        if spec is not None else []
    return list(dict.fromkeys([*from_spec, *checked_paths(verifier_text(task))]))


def check_instruction(task: Task) -> list[Finding]:
    instruction = task.instruction
    stores = tuple(store.rstrip("/") + "/" for store in task.config.environment.state_stores)
    missing = [p for p in verifier_paths(task)
               if p not in instruction and not _mentions_tail(instruction, p) and not p.startswith(stores)]
    if not missing:
        return []
    return [Finding("instruction", f"the verifier (tests/) checks {', '.join(missing)} but {INSTRUCTION} never names "
                    f"{'it' if len(missing) == 1 else 'them'}",
                    f"say in {INSTRUCTION} what must be at {', '.join(missing)} (or stop checking it)")]


def _mentions_tail(instruction: str, path: str) -> bool:
    # "/app/report.txt" is named when the instruction says "report.txt" in the working directory /app.
    name = path.rsplit("/", 1)[-1]
    return bool(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", instruction)) and "." in name


# ---- tests and solution stay out of the image ---------------------------------------------------

def check_visibility(task: Task) -> list[Finding]:
    findings = []
    dockerfile = _read(task.dockerfile)
    for number, line in enumerate(dockerfile.splitlines(), 1):
        words = line.split()
        if words and words[0].upper() in ("COPY", "ADD") and re.search(r"\b(tests|solution|solve\.sh|test\.sh)\b",
                                                                      " ".join(words[1:-1])):
            findings.append(Finding("visibility", f"environment/Dockerfile line {number} copies verifier or "
                                    f"solution files into the image: {line.strip()}",
                                    "remove that COPY: tests/ and solution/ are put in place only when they run"))
    env_files = _file_bytes(task.path / "environment")
    for folder in ("tests", "solution"):
        for rel, content in _file_bytes(task.path / folder).items():
            copies = [e for e, data in env_files.items() if data == content and len(content) >= MIN_LEAK_BYTES]
            if copies:
                findings.append(Finding("visibility", f"environment/{copies[0]} is a copy of {folder}/{rel}, so the "
                                        "agent can read it", f"delete environment/{copies[0]}"))
    return findings


def _file_bytes(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.stat().st_size <= 1 << 20}


# ---- the solution solves, it does not copy the answer or the reward ------------------------------

def check_hardcoded(task: Task) -> list[Finding]:
    solve = _read(task.path / SOLUTION_SCRIPT)
    code = "\n".join(line for line in solve.splitlines() if not line.lstrip().startswith("#"))
    findings = []
    if re.search(r"/logs/verifier|reward\.(json|txt)", code):
        findings.append(Finding("hardcoded", f"{SOLUTION_SCRIPT} writes the verifier's reward itself",
                                "make solve.sh do the task; only tests/test.sh writes the reward"))
    if re.search(r"(?<![\w.])/tests(/|\b)", code):
        findings.append(Finding("hardcoded", f"{SOLUTION_SCRIPT} reads /tests (the verifier's files, which the "
                                "agent never sees)", "derive the answer in solve.sh the way an agent would"))
    for rel, content in _file_bytes(task.tests_dir).items():
        text = content.decode(errors="replace").strip()
        if rel != "test.sh" and not rel.endswith((".sh", ".py")) and len(text) >= 32 and text in solve:
            findings.append(Finding("hardcoded", f"{SOLUTION_SCRIPT} pastes in tests/{rel} (the expected answer)",
                                    "compute the answer in solve.sh instead of copying the expected output"))
    return findings


# ---- test dependencies are in the image ---------------------------------------------------------

def invoked_commands(test_sh: str) -> list[str]:
    """The external commands a shell script runs (first word of each simple command).

    A verifier that installs its own tools when it runs (Harbor's uv bootstrap: ``curl ... | sh``,
    ``apt-get install``, ``pip install``) is read up to that line only: what follows may be
    provided by the install.
    """
    defined = set(re.findall(r"^\s*(?:function\s+)?([\w-]+)\s*\(\)", test_sh, re.M))
    before_install = INSTALL.split(test_sh, maxsplit=1)[0]
    before_install = before_install.rsplit("\n", 1)[0] if before_install != test_sh else test_sh
    commands: list[str] = []
    for segment in _command_segments(_without_heredocs(before_install)):
        word = _first_word(segment)
        if word and word not in SHELL_WORDS and word not in defined and word not in commands:
            commands.append(word)
    return commands


def python_modules(test_sh: str) -> list[str]:
    """Modules run with ``python3 -m MODULE`` (pytest, unittest, ...)."""
    return sorted(set(re.findall(r"\bpython3?\s+-m\s+([\w.]+)", test_sh)))


def _without_heredocs(text: str) -> str:
    kept, terminator = [], None
    for line in text.splitlines():
        if terminator is not None:
            if line.strip() == terminator:
                terminator = None
            continue
        match = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        terminator = match.group(1) if match else None
        kept.append(line)
    return "\n".join(kept)


def _command_segments(text: str) -> list[str]:
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    substitutions = re.findall(r"\$\(([^()]*)\)|`([^`]*)`", text)
    # Quoted strings may span lines (python3 -c '<a program>'): their lines are arguments, not commands.
    text = re.sub(r"'[^']*'", "''", text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    text = re.sub(r"\$\([^()]*\)|`[^`]*`", " ", text)
    inner = [a or b for a, b in substitutions]
    return [s for part in [text, *inner] for s in re.split(r"[;&|(){}\n]|\bthen\b|\bdo\b|\belse\b", part)]


def _first_word(segment: str) -> str | None:
    try:
        words = shlex.split(segment, comments=True)
    except ValueError:
        words = segment.split()
    words = [w for w in words if not re.match(r"^\w+=", w)]
    while words and words[0] in ("if", "while", "until", "!", "elif", "time", "exec", "command", "then", "do"):
        words = words[1:]
    if not words or not re.fullmatch(r"[A-Za-z_][\w.+-]*|/[\w./+-]+", words[0]):
        return None
    word = words[0]
    return None if word.startswith(("/tests/", "/solution/", "/logs/")) else word


def dependency_probe(commands: list[str], modules: list[str]) -> list[str]:
    """A shell command printing ``cmd:NAME`` / ``mod:NAME`` for each one missing in the image."""
    checks = [f"command -v {shlex.quote(c)} >/dev/null 2>&1 || echo cmd:{shlex.quote(c)}" for c in commands]
    checks += [f"python3 -c {shlex.quote(f'import {m}')} >/dev/null 2>&1 || echo mod:{m}" for m in modules]
    return ["sh", "-c", "; ".join(checks) or "true"]


def spec_requirements(task: Task) -> tuple[list[str], list[str]]:
    """Commands and python modules a compiled verifier (tests/forge_verify.json) needs in the image."""
    from openforgerl.verifiers import CommandCheck, image_needs
    from openforgerl.verifiers.footprint import leaves

    spec = _spec(task)
    if spec is None:
        return [], []
    needs = [n for n in image_needs(spec) if not n.startswith("/")]  # a URL file appears at container start
    commands = [n for n in needs if ":" not in n]
    for leaf in leaves(spec):
        if isinstance(leaf, CommandCheck):
            commands += invoked_commands(leaf.command)
    return list(dict.fromkeys(commands)), [n.split(":", 1)[1] for n in needs if ":" in n]


def _spec(task: Task) -> Any:
    """The compiled verifier spec, or None (hand-written test.sh, or a spec the verifier will reject itself)."""
    from openforgerl.errors import UserError
    from openforgerl.verifiers import load_verifier

    try:
        return load_verifier(task.tests_dir)
    except UserError:
        return None


def check_dependencies(client: Any, image: str, task: Task) -> list[Finding]:
    """Run the probe in a throwaway container of ``image`` (no network) and report what is missing."""
    test_sh = _read(task.path / TEST_SCRIPT)
    spec_commands, spec_modules = spec_requirements(task)
    commands = sorted(set(invoked_commands(test_sh)) | set(spec_commands))
    modules = sorted(set(python_modules(test_sh)) | set(spec_modules))
    if not commands and not modules:
        return []
    import docker.errors

    try:
        output = client.containers.run(image, dependency_probe(commands, modules), entrypoint=[],
                                       network_mode="none", remove=True, stdout=True, stderr=False)
    except docker.errors.DockerException as exc:
        raise EnvBuildError(f"probing {image} for the verifier's commands failed: {exc}",
                            fix="check that the image starts a shell (docker run IMAGE sh -c true)") from exc
    missing = output.decode(errors="replace").split()
    if not missing:
        return []
    names = ", ".join(m.split(":", 1)[1] + (" (python module)" if m.startswith("mod:") else "") for m in missing)
    return [Finding("dependencies", f"the verifier runs {names}, missing in the image",
                    "install it in environment/Dockerfile (e.g. apt-get install -y --no-install-recommends "
                    "<package>, or template_params packages = [...])")]
