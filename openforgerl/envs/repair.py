"""The LLM repairer: a failed task's files, reason and logs in; whole-file replacements out.

The prompt is rendered from ``templates/repair/{system,user}.jinja`` and sent to any
OpenAI-compatible endpoint (openai SDK). The answer is a JSON object
``{"explanation": str, "edits": [{"path": str, "content": str}]}``.

Invariant: an edit is applied only inside the task directory and only to instruction.md or a file
under environment/, tests/ or solution/; a reply that is not such an object is rejected whole
(``EnvBuildError``), so a bad reply never leaves a task half-edited.
"""

from __future__ import annotations

import json
import os
import re
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2
from pydantic import BaseModel, Field, ValidationError

from openforgerl.envs.render import RENDERED_MARK
from openforgerl.errors import EnvBuildError
from openforgerl.tasks import INSTRUCTION, Task

EDITABLE_DIRS = ("environment", "tests", "solution")
MAX_FILE_CHARS = 6000
MAX_FILES = 20


class FileEdit(BaseModel):
    path: str
    """Relative to the task directory."""
    content: str
    """The whole new file."""


class RepairProposal(BaseModel):
    explanation: str = ""
    edits: list[FileEdit] = Field(default_factory=list)


class RepairSettings(BaseModel):
    """Where the repair model is and how to call it."""

    base_url: str
    """OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (``/v1`` is added when missing)."""
    model: str | None = None
    """Model name; default: the first one the endpoint lists."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the key (a local server needs none)."""
    temperature: float = 0.0
    max_tokens: int = 4096
    timeout_s: float = 300.0


def editable(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        return False
    return path == INSTRUCTION or (parts[0] in EDITABLE_DIRS and len(parts) > 1)


def task_files(task: Task) -> dict[str, str]:
    """The text files the repairer is shown (task.toml, instruction, environment, tests, solution)."""
    shown: dict[str, str] = {}
    candidates = [task.path / "task.toml", task.path / INSTRUCTION]
    for folder in EDITABLE_DIRS:
        candidates += sorted(p for p in (task.path / folder).rglob("*") if p.is_file())
    for path in candidates[:MAX_FILES]:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        cut = f"\n... ({len(text) - MAX_FILE_CHARS} more characters)" if len(text) > MAX_FILE_CHARS else ""
        shown[str(path.relative_to(task.path))] = text[:MAX_FILE_CHARS] + cut
    return shown


def render_prompt(context: dict[str, Any]) -> list[dict[str, str]]:
    folder = Path(str(files("openforgerl.templates"))) / "repair"
    jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=False,
                               keep_trailing_newline=True)
    return [{"role": "system", "content": jinja.get_template("system.jinja").render(**context)},
            {"role": "user", "content": jinja.get_template("user.jinja").render(**context)}]


def parse_reply(text: str) -> RepairProposal:
    """The JSON object in a reply (code fences and text around it are tolerated)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise EnvBuildError(f"repair model reply holds no JSON object: {text[:200]!r}",
                            fix="use a model that follows the JSON answer format, or fix the task by hand")
    try:
        proposal = RepairProposal.model_validate(json.loads(text[start:end + 1]))
    except (ValueError, ValidationError) as exc:
        raise EnvBuildError(f"repair model reply is not a valid edit list: {str(exc)[:300]}",
                            fix="use a model that follows the JSON answer format") from exc
    refused = [e.path for e in proposal.edits if not editable(e.path)]
    if refused:
        raise EnvBuildError(f"repair model tried to edit {', '.join(refused)} (outside instruction.md, environment/, "
                            "tests/, solution/)", fix="nothing to do: the reply was rejected whole")
    return proposal


def apply_edits(task_dir: Path, proposal: RepairProposal) -> list[str]:
    """Write every edit; returns the paths written. A repaired Dockerfile is no longer template output."""
    written = []
    for edit in proposal.edits:
        target = task_dir / edit.path
        content = edit.content
        if edit.path == "environment/Dockerfile" and content.startswith(RENDERED_MARK):
            content = content.split("\n", 1)[1] if "\n" in content else ""
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content if content.endswith("\n") else content + "\n", encoding="utf-8")
        if target.suffix == ".sh":
            target.chmod(0o755)
        written.append(edit.path)
    return written


class Repairer:
    """Asks the repair model for edits; one ``propose`` per round."""

    def __init__(self, settings: RepairSettings) -> None:
        self.settings = settings
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import openai  # a core dependency; imported here because it is slow to import
            base = self.settings.base_url.rstrip("/")
            base = base if re.search(r"/v\d+$", base) else base + "/v1"
            self._client = openai.OpenAI(base_url=base, api_key=os.environ.get(self.settings.api_key_env) or "none",
                                         timeout=self.settings.timeout_s, max_retries=1)
        return self._client

    def model(self) -> str:
        if self.settings.model:
            return self.settings.model
        listed = self._call(lambda: self.client.models.list().data)
        if not listed:
            raise EnvBuildError(f"repair endpoint {self.settings.base_url} lists no model",
                                fix="pass the model name (repair.model=NAME)")
        self.settings.model = listed[0].id
        return self.settings.model

    def propose(self, context: dict[str, Any]) -> RepairProposal:
        messages = render_prompt(context)
        model = self.model()
        reply = self._call(lambda: self.client.chat.completions.create(
            model=model, messages=messages, temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens))
        return parse_reply(reply.choices[0].message.content or "")

    def _call(self, request: Any) -> Any:
        import openai

        try:
            return request()
        except openai.OpenAIError as exc:
            raise EnvBuildError(f"repair model at {self.settings.base_url} failed: {exc}",
                                fix="check --repair-model (an OpenAI-compatible /v1 endpoint) is up") from exc
