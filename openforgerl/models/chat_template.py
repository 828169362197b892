"""Render a chat template the way Hugging Face tokenizers (and so vLLM) render it, without transformers.

Invariant: ``render(text, ...)`` returns exactly what ``tokenizer.apply_chat_template(...,
tokenize=False)`` returns for the same template text and arguments: same jinja2 settings
(sandboxed, ``trim_blocks``, ``lstrip_blocks``, loop controls) and the same ``tojson`` (key order
kept, no HTML escaping, non-ASCII kept). Tests compare the two when transformers is installed.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=8)
def _compiled(template_text: str) -> jinja2.Template:
    return environment().from_string(template_text)


def render(template_text: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = False, **extra: Any) -> str:
    """The prompt text ``template_text`` makes of ``messages`` (and ``tools``)."""
    return _compiled(template_text).render(messages=messages, tools=tools,
                                           add_generation_prompt=add_generation_prompt, **extra)
