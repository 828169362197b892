"""webkit: what the bundled gui web apps share: routing, forms, pages, the answer form, serving (stdlib only).

Each app's ``app.py`` registers its pages and JSON API on an ``App`` and calls ``serve``; its
``seed.py`` calls ``create_database``. Pages are server-rendered HTML with plain forms (every input
labelled), so the DOM and the accessibility tree show the state and no JavaScript is needed.

Invariant: every request runs under one lock with its own SQLite connection that is committed only
when the handler returns normally, and nothing reads the clock or a random source, so the same
requests always leave the same database.
"""

import argparse
import html
import json
import os
import re
import sqlite3
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEFAULT_DB = "/var/lib/webapp/app.db"
ANSWERS_SCHEMA = "CREATE TABLE answers (id INTEGER PRIMARY KEY, answer TEXT NOT NULL);\n"
MAX_BODY = 1 << 20
esc = html.escape


class Invalid(ValueError):
    """A request the app refuses (400), with a message for the user."""


class Missing(LookupError):
    """Something the request names does not exist (404)."""


class Request:
    def __init__(self, method, path, query, body, content_type, groups, db):
        self.method, self.path, self.groups, self.db = method, path, groups, db
        self.query = {k: v[0] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
        self.data = {}
        if body and "json" in content_type:
            try:
                self.data = json.loads(body)
            except ValueError as exc:
                raise Invalid(f"the body is not JSON: {exc}") from None
            if not isinstance(self.data, dict):
                raise Invalid("the body must be a JSON object")
        elif body:
            parsed = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            self.data = {k: v[0] for k, v in parsed.items()}

    @property
    def is_api(self):
        return self.path.startswith("/api/")

    def text(self, name, default=None):
        """A form or JSON field as stripped text; Invalid when it is required (no default) and missing."""
        value = self.data.get(name, default)
        if value is None:
            raise Invalid(f"{name} is required")
        return str(value).strip()

    def integer(self, name):
        try:
            return int(self.data.get(name))
        except (TypeError, ValueError):
            raise Invalid(f"{name} must be a whole number") from None


class Response:
    def __init__(self, status, body, content_type, headers=()):
        self.status, self.body, self.content_type, self.headers = status, body, content_type, list(headers)


def redirect(location):
    return Response(303, b"", "text/plain", [("Location", location)])


def api(value, status=200):
    return Response(status, (json.dumps(value, indent=1) + "\n").encode(), "application/json")


# ---- HTML pieces ---------------------------------------------------------------------------------

def field(label, name, value="", kind="text", placeholder=""):
    extra = f' placeholder="{esc(placeholder)}"' if placeholder else ""
    return (f'<p><label for="{name}">{esc(label)}</label> '
            f'<input id="{name}" name="{name}" type="{kind}" value="{esc(str(value))}"{extra}></p>')


def select(label, name, options, selected=""):
    choices = "".join(f'<option value="{esc(str(value))}"{" selected" if str(value) == str(selected) else ""}>'
                      f"{esc(str(text))}</option>" for value, text in options)
    return f'<p><label for="{name}">{esc(label)}</label> <select id="{name}" name="{name}">{choices}</select></p>'


def form(action, inner, submit, name=""):
    """A POST form; ``name`` labels the form (and its button) for assistive technology."""
    labelled = f' aria-label="{esc(name)}"' if name else ""
    return (f'<form method="post" action="{esc(action)}"{labelled}>{inner}'
            f'<button type="submit">{esc(submit)}</button></form>')


def button(action, text, label):
    """A one-button POST form, e.g. Delete; ``label`` names the button's target (``Delete: Buy milk``)."""
    return (f'<form method="post" action="{esc(action)}" class="inline">'
            f'<button type="submit" aria-label="{esc(label)}">{esc(text)}</button></form>')


def link(href, text):
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def table(headers, rows, caption):
    """``rows`` hold HTML already escaped by the caller."""
    head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:60em}nav a{margin-right:1em}"
         "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
         "form.inline{display:inline}caption{text-align:left;font-weight:bold;margin:.5em 0}")


class App:
    """An app's routes and its page layout."""

    def __init__(self, title, nav):
        self.title, self.nav, self.routes = title, list(nav) + [("/answer", "Answer")], []
        add_answer_routes(self)

    def route(self, method, pattern):
        def register(handler):
            self.routes.append((method, re.compile(pattern + r"\Z"), handler))
            return handler
        return register

    def page(self, heading, body, status=200):
        nav = "".join(link(href, text) for href, text in self.nav)
        title = self.title if heading == self.title else f"{heading} - {self.title}"
        text = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
                f'<style>{STYLE}</style></head><body><header><nav aria-label="Main">{nav}</nav></header>'
                f'<main><h1>{esc(heading)}</h1>{body}</main></body></html>\n')
        return Response(status, text.encode(), "text/html; charset=utf-8")

    def dispatch(self, request):
        allowed = False
        for method, pattern, handler in self.routes:
            found = pattern.match(request.path)
            if found:
                allowed = True
                if method == request.method:
                    request.groups = found.groups()
                    return handler(request)
        if allowed:
            return self.error(request, 405, f"{request.method} is not allowed here")
        raise Missing(f"there is no page {request.path}")

    def error(self, request, status, message):
        if request.is_api:
            return api({"error": message}, status)
        body = f'<p role="alert">{esc(message)}</p><p>{link("/", "Back to the start page")}</p>'
        return self.page("Error", body, status)


# ---- the answer form (look-up tasks: the browser's "done" carries no answer) ------------------

def record_answer(db, text):
    text = str(text).strip()
    if not text:
        raise Invalid("the answer is empty")
    db.execute("INSERT INTO answers (answer) VALUES (?)", (text,))


def add_answer_routes(app):
    @app.route("GET", "/answer")
    def answer_page(request):
        body = ("<p>Questions that ask you to find something out are answered here. Only your latest answer "
                "counts.</p>" + form("/answer", field("Answer", "answer"), "Submit answer", "Answer"))
        return app.page("Answer", body)

    @app.route("POST", "/answer")
    def answer_form(request):
        record_answer(request.db, request.text("answer"))
        return app.page("Answer", '<p role="status">Your answer was recorded.</p>')

    @app.route("POST", "/api/answer")
    def answer_api(request):
        record_answer(request.db, request.text("answer"))
        return api({"recorded": True}, 201)


# ---- serving -------------------------------------------------------------------------------------

def connect(path):
    db = sqlite3.connect(path, timeout=10)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA foreign_keys = ON")
    return db


def make_handler(app, db_path):
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        server_version = "forge-webapp"

        def handle_any(self):
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY)) if length else b""
            with lock:
                db = connect(db_path)
                try:
                    request = Request(self.command, parts.path, parts.query, body,
                                      self.headers.get("Content-Type", ""), (), db)
                    response = app.dispatch(request)
                    db.commit()
                except (ValueError, sqlite3.IntegrityError) as exc:  # Invalid, and the store's refusals
                    db.rollback()
                    response = app.error(Request(self.command, parts.path, "", b"", "", (), db), 400, str(exc))
                except LookupError as exc:  # Missing, and the store's unknown ids
                    db.rollback()
                    response = app.error(Request(self.command, parts.path, "", b"", "", (), db), 404, str(exc))
                finally:
                    db.close()
            self.send_response(response.status)
            for name, value in [("Content-Type", response.content_type),
                                ("Content-Length", str(len(response.body))), *response.headers]:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_DELETE = handle_any

        def do_HEAD(self):
            self.command = "GET"
            self.handle_any()

    return Handler


def serve(app, argv=None):
    """``app.py [--bind HOST] [--port N] [--db PATH]``: serve until killed; prints the port like http.server."""
    parser = argparse.ArgumentParser(description=app.title)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--db", default=os.environ.get("WEBAPP_DB", DEFAULT_DB))
    args = parser.parse_args(argv)
    if not Path(args.db).is_file():
        sys.exit(f"{args.db} does not exist: run seed.py first")
    server = ThreadingHTTPServer((args.bind, args.port), make_handler(app, args.db))
    host, port = server.server_address[:2]
    print(f"Serving HTTP on {host} port {port} (http://{host}:{port}/) ...", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def create_database(root, schema, populate):
    """A fresh ``root``/var/lib/webapp/app.db (root's alone: dir 0700, file 0600) holding ``schema`` plus
    the answers table, filled by ``populate(db)``."""
    path = Path(root) / DEFAULT_DB.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    path.unlink(missing_ok=True)
    db = connect(str(path))
    try:
        db.executescript(schema + ANSWERS_SCHEMA)
        populate(db)
        db.commit()
    finally:
        db.close()
    os.chmod(path, 0o600)
    return path


def seed_main(schema, populate, argv=None):
    parser = argparse.ArgumentParser(description="Create the app's database with its fixed seed data.")
    parser.add_argument("--root", default="/", help="the directory the sandbox's / maps to")
    args = parser.parse_args(argv)
    print(create_database(args.root, schema, populate))
