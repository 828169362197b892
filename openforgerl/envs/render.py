"""Rendering a task's environment/Dockerfile from a base-environment template (claw, code, gui).

A task opts in with ``[environment] template = "claw"`` and optional ``[environment.template_params]``;
the template ``templates/env/<name>/Dockerfile.jinja`` is rendered into ``environment/Dockerfile``
and the template's support files (e.g. ``forge_services.py``) are copied beside it.

Invariant: a Dockerfile is only ever (re)written when it is missing or still carries the
``RENDERED_MARK`` first line, so a hand-edited or repaired Dockerfile is never overwritten;
rendering the same template with the same params gives the same bytes (so the same image hash).
"""

from __future__ import annotations

import shutil
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2

from openforgerl.errors import UnknownNameError, UserError
from openforgerl.tasks import DOCKERFILE, TASK_TOML

RENDERED_MARK = "# forge: rendered from template"
DOCKERFILE_TEMPLATE = "Dockerfile.jinja"
DEFAULT_BASE = "openforgerl/base:bookworm"


def templates_root() -> Path:
    return Path(str(files("openforgerl.templates"))) / "env"


def known_templates() -> list[str]:
    return sorted(p.parent.name for p in templates_root().glob(f"*/{DOCKERFILE_TEMPLATE}"))


def environment_table(task_dir: Path) -> dict[str, Any]:
    """task.toml's [environment], read raw: a templated task has no Dockerfile yet, so Task.load refuses it."""
    try:
        data = tomllib.loads((task_dir / TASK_TOML).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}  # Task.load reports why
    table = data.get("environment")
    return table if isinstance(table, dict) else {}


def template_params(task_dir: Path, table: dict[str, Any]) -> dict[str, Any]:
    params = table.get("template_params") or {}
    if not isinstance(params, dict):
        raise UserError(f"{task_dir / TASK_TOML}: environment.template_params: must be a table",
                        fix="write [environment.template_params] with key = value lines")
    return params


def render_dockerfile(name: str, params: dict[str, Any], env_dir: Path) -> str:
    """The Dockerfile text of template ``name`` for a build context ``env_dir``."""
    folder = templates_root() / name
    if not (folder / DOCKERFILE_TEMPLATE).is_file():
        raise UnknownNameError("environment template", name, known_templates())
    loader = jinja2.FileSystemLoader(str(folder))
    jinja = jinja2.Environment(loader=loader, keep_trailing_newline=True,
                               autoescape=False)
    context = {"base_image": DEFAULT_BASE, "packages": [], "services": [], "setup": [],
               "has_files": (env_dir / "files").is_dir(), **params}
    try:
        body = jinja.get_template(DOCKERFILE_TEMPLATE).render(**context)
    except jinja2.UndefinedError as exc:
        raise UserError(f"template {name}: {exc.message}",
                        fix="set it under [environment.template_params] in task.toml") from exc
    return f'{RENDERED_MARK} "{name}"; edit [environment.template_params], not this file\n{body.lstrip()}'


def support_files(name: str) -> list[Path]:
    folder = templates_root() / name
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != DOCKERFILE_TEMPLATE)


def is_rendered(dockerfile: Path) -> bool:
    return dockerfile.is_file() and dockerfile.read_text(errors="replace").startswith(RENDERED_MARK)


def render_environment(task_dir: Path) -> bool:
    """Render the task's template into environment/ when it asks for one; True if anything was written."""
    table = environment_table(task_dir)
    name = table.get("template")
    dockerfile = task_dir / DOCKERFILE
    if not name or (dockerfile.exists() and not is_rendered(dockerfile)):
        return False
    env_dir = dockerfile.parent
    env_dir.mkdir(exist_ok=True)
    changed = _write_if_changed(dockerfile, render_dockerfile(str(name), template_params(task_dir, table), env_dir))
    for source in support_files(str(name)):
        target = env_dir / source.name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copyfile(source, target)
            changed = True
    return changed


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    path.write_text(text)
    return True
