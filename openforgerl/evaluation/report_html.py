"""HTML building blocks of ``forge report``: escaping, number formats, tables, the page shell.

Invariant: text reaches the page only through ``h`` (escaped) or as ``Html`` (a fragment built here
from escaped parts). A run's files hold model output and tool results, which are untrusted, so no
``str`` that is not ``Html`` is ever placed unescaped; and the page's Content-Security-Policy lets
only the report's own script run (by its hash) and loads nothing but ``data:`` images, so even a
slip could neither run injected script nor reach the network.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Container, Iterable, Sequence
from importlib import resources
from typing import Any

MARKER = re.compile(r"<!--forge:(policy|title|style|body|script)-->")


class Html(str):
    """A fragment that is already safe HTML (every text in it went through ``h``)."""


def h(value: Any) -> str:
    """Escaped text for the page (quotes too: the result may sit in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def text(value: Any) -> str:
    """Escaped for element content only, never an attribute (quotes stay as they are: the tokens of a
    JSON-heavy prompt would grow sixfold as &quot;)."""
    return html.escape("" if value is None else str(value), quote=False)


def join(parts: Iterable[str]) -> Html:
    return Html("".join(parts))


def fmt(value: Any, digits: int = 3) -> str:
    """A cell's text: '-' for None, fixed digits for floats, as-is otherwise."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def cell(value: Any) -> str:
    return value if isinstance(value, Html) else h(fmt(value))


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], *, cls: str = "", table_id: str = "",
          numeric: Container[int] | None = None) -> Html:
    """A table; the columns in ``numeric`` (default: all but the first) are right-aligned."""
    attrs = (f' class="{h(cls)}"' if cls else "") + (f' id="{h(table_id)}"' if table_id else "")
    right = numeric if numeric is not None else range(1, len(headers))

    def row(values: Sequence[Any], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}{' class=num' if i in right else ''}>{cell(v)}</{tag}>"
                                for i, v in enumerate(values)) + "</tr>"

    body = "".join(row(values, "td") for values in rows)
    return Html(f"<table{attrs}><thead>{row(headers, 'th')}</thead><tbody>{body}</tbody></table>")


def link(href: str, text: Any) -> Html:
    """A link inside the report (``href`` is a ``#fragment``: the page never links out)."""
    return Html(f'<a href="{h(href)}">{h(text)}</a>')


def pre(content: Any, cls: str = "") -> Html:
    attrs = f' class="{h(cls)}"' if cls else ""
    return Html(f"<pre{attrs}>{text(content)}</pre>")


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def png(data: bytes, alt: str) -> Html:
    """An image embedded as a data: URI."""
    return Html(f'<img alt="{h(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">')


def note(text: Any, cls: str = "note") -> Html:
    return Html(f'<p class="{h(cls)}">{h(text)}</p>')


def asset(name: str) -> str:
    return resources.files("openforgerl.templates").joinpath("report", name).read_text(encoding="utf-8")


def page(title: str, body: str) -> str:
    """The whole document: the report's CSS and script inline, a CSP that allows nothing else."""
    style, script = asset("report.css"), asset("report.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
              "base-uri 'none'; form-action 'none'")
    parts = {"policy": h(policy), "title": h(title), "style": style, "body": body, "script": script}
    # one pass: what is put in is never scanned for markers again
    return MARKER.sub(lambda match: parts[match.group(1)], asset("page.html"))
