"""State checks for forge_verify: command exit code, files, JSON paths, SQLite and HTTP queries.

Stdlib only; each ``check_*(spec, ctx)`` returns ``(score, details)`` or raises (= failed, with
the error recorded). Invariant: checks only read — files are read with a size cap and only when
they are regular files (a FIFO or /dev/zero planted at the path cannot hang or exhaust the
verifier), SQLite is opened read-only and never created, HTTP is a GET.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

TAIL = 2000


# -- commands -------------------------------------------------------------------------------

def run_shell(command: str, cwd: Path, timeout: float, ctx) -> tuple[int | None, str]:
    """Run ``bash -c command`` in its own process group; kill the whole group on timeout.

    Returns (exit code or None on timeout, last TAIL characters of stdout+stderr).
    """
    env = dict(os.environ, FORGE_ROOT=ctx.env_root)
    proc = subprocess.Popen(["bash", "-c", command], cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output.decode(errors="replace")[-TAIL:]
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        output, _ = proc.communicate()
        return None, output.decode(errors="replace")[-TAIL:]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_command(spec: dict, ctx) -> tuple[bool, dict]:
    code, output = run_shell(spec["command"], ctx.path(spec.get("cwd", "/app")), spec.get("timeout_sec", 60), ctx)
    details = {"exit_code": code, "expect_exit": spec.get("expect_exit", 0), "output_tail": output}
    if code is None:
        details["error"] = f"timed out after {spec.get('timeout_sec', 60)} s"
        return False, details
    return code == spec.get("expect_exit", 0), details


# -- files ----------------------------------------------------------------------------------

def check_file_exists(spec: dict, ctx) -> tuple[bool, dict]:
    target = ctx.path(spec["path"])
    present = target.exists() or target.is_symlink()  # a dangling link is still something at the path
    if spec.get("absent"):
        return not present, {"present": present}
    kind_ok = {"file": target.is_file, "dir": target.is_dir, "any": target.exists}[spec.get("kind", "file")]()
    return kind_ok, {"present": present, "kind_ok": kind_ok}


def read_text(container_path: str, ctx, max_bytes: int = 16 * 1024 * 1024) -> str:
    """A regular file's text (UTF-8, errors replaced); raises FileNotFoundError/ValueError otherwise."""
    target = ctx.path(container_path)
    info = os.stat(target)  # follows symlinks: what a reader of the path would get
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{container_path} is not a regular file")
    if info.st_size > max_bytes:
        raise ValueError(f"{container_path} is {info.st_size} bytes, over max_bytes={max_bytes}")
    with open(target, "rb") as handle:
        return handle.read(max_bytes + 1)[:max_bytes].decode("utf-8", errors="replace")


def check_file_contains(spec: dict, ctx) -> tuple[bool, dict]:
    text = read_text(spec["path"], ctx, spec.get("max_bytes", 16 * 1024 * 1024))
    needle = spec["text"]
    if spec.get("ignore_case"):
        text, needle = text.casefold(), needle.casefold()
    found = needle in text
    return (not found) if spec.get("absent") else found, {"found": found}


def check_file_regex(spec: dict, ctx) -> tuple[bool, dict]:
    text = read_text(spec["path"], ctx, spec.get("max_bytes", 16 * 1024 * 1024))
    flags = (re.IGNORECASE if spec.get("ignore_case") else 0) | (re.MULTILINE if spec.get("multiline", True) else 0)
    pattern = re.compile(spec["pattern"], flags)
    match = pattern.fullmatch(text.rstrip("\n")) if spec.get("fullmatch") else pattern.search(text)
    return match is not None, {"matched": match.group(0)[:200] if match else None}


# -- JSON -----------------------------------------------------------------------------------

_STEP = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]"]+)')
MISSING = object()


def json_path_steps(path: str) -> list[str | int]:
    """``$.a[0]["b.c"]`` -> ["a", 0, "b.c"]."""
    rest, steps, pos = path[1:] if path.startswith("$") else path, [], 0
    while pos < len(rest):
        match = _STEP.match(rest, pos)
        if not match or match.end() == pos:
            raise ValueError(f"bad JSON path {path!r} at {rest[pos:]!r}")
        quoted, index, key = match.groups()
        steps.append(int(index) if index is not None else json.loads(f'"{quoted}"') if quoted is not None else key)
        pos = match.end()
    return steps


def json_at(document, path: str):
    """The value at ``path``, or MISSING when a step does not exist (no exception for absence)."""
    value = document
    for step in json_path_steps(path):
        if isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return MISSING
    return value


def json_equal(a, b) -> bool:
    """JSON equality: numbers by value, but booleans never equal numbers (Python says True == 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def compare_at(document, path: str, expected) -> tuple[bool, dict]:
    actual = json_at(document, path)
    if actual is MISSING:
        return False, {"json_path": path, "found": False}
    return json_equal(actual, expected), {"json_path": path, "found": True, "actual": _short(actual)}


def _short(value, limit: int = 500):
    text = json.dumps(value, default=str)
    return value if len(text) <= limit else text[:limit] + "..."


def check_json_path(spec: dict, ctx) -> tuple[bool, dict]:
    text = read_text(spec["path"], ctx, spec.get("max_bytes", 16 * 1024 * 1024))
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{spec['path']} is not valid JSON: {exc}") from None
    return compare_at(document, spec["json_path"], spec.get("equals"))


# -- SQLite ---------------------------------------------------------------------------------

def check_sqlite(spec: dict, ctx) -> tuple[bool, dict]:
    database = ctx.path(spec["database"])
    if not database.is_file():
        raise FileNotFoundError(f"SQLite database {spec['database']} does not exist")
    rows = _query(database, spec["query"], spec.get("timeout_sec", 10.0))
    details = {"rows": _short(rows), "row_count": len(rows)}
    if spec.get("expect") == "scalar":
        if len(rows) != 1 or len(rows[0]) < 1:
            details["error"] = f"expected one row holding a scalar, got {len(rows)} row(s)"
            return False, details
        return json_equal(rows[0][0], spec.get("expect_scalar")), details
    expected = spec.get("expect_rows") or []
    if not spec.get("ordered", True):
        rows, expected = _canonical(rows), _canonical(expected)
    return json_equal(rows, expected), details


def _query(database: Path, query: str, timeout: float) -> list[list]:
    uri = "file:" + urllib.request.pathname2url(str(database)) + "?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=min(timeout, 5.0))
    deadline = time.monotonic() + timeout
    connection.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        return [list(row) for row in connection.execute(query).fetchall()]
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            raise TimeoutError(f"query ran over {timeout} s") from None
        raise ValueError(f"query failed: {exc}") from None
    finally:
        connection.close()


def _canonical(rows: list) -> list:
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


# -- HTTP -----------------------------------------------------------------------------------

def resolve_url(spec: dict, ctx) -> str:
    """The URL to load: ``url`` itself, or the base in ``base_url_file`` joined with the path ``url``."""
    if not spec.get("base_url_file"):
        return spec["url"]
    base = read_text(spec["base_url_file"], ctx, 4096).strip()
    if not re.match(r"^https?://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?/?$", base):
        raise ValueError(f"{spec['base_url_file']} holds {base[:100]!r}, not a loopback base URL")
    return base.rstrip("/") + spec["url"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is reported as its own status: following it could leave the loopback interface."""

    def redirect_request(self, *args, **kwargs):
        return None


def http_get(url: str, timeout: float) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)
    request = urllib.request.Request(url, headers={"User-Agent": "forge-verify"})
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read(16 * 1024 * 1024)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1024 * 1024)


def check_http(spec: dict, ctx) -> tuple[bool, dict]:
    url = resolve_url(spec, ctx)
    try:
        status, body = http_get(url, spec.get("timeout_sec", 10.0))
    except (urllib.error.URLError, OSError) as exc:
        raise ConnectionError(f"GET {url} failed: {getattr(exc, 'reason', exc)}") from None
    details = {"url": url, "status": status}
    passed = status == spec.get("expect_status", 200)
    text = body.decode("utf-8", errors="replace")
    if spec.get("body_contains") is not None:
        details["body_contains"] = spec["body_contains"] in text
        passed = passed and details["body_contains"]
    if spec.get("json_path") is not None:
        try:
            document = json.loads(text)
        except ValueError:
            details["error"] = f"body is not JSON: {text[:200]!r}"
            return False, details
        matched, found = compare_at(document, spec["json_path"], spec.get("equals"))
        details.update(found)
        passed = passed and matched
    return passed, details
