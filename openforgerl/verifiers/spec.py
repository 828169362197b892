"""Verifier specs: what a task's verifier checks, as data that compiles into ``tests/test.sh``.

One pydantic model per kind (``type`` is the tag); ``all`` / ``any`` / ``weighted`` compose them.
Every path a spec names is absolute *inside the task container*; the runner maps it under
``--root`` when it runs on the host (unit tests). Invariant: a spec that validates here is one the
stdlib runner (``runner/forge_verify.py``) can evaluate without guessing — every default is
written into the compiled JSON, so the runner never needs to know one.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """Key of this check in reward.json's metrics; defaults to its type (``file_exists_2`` on repeats)."""

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and not NAME_RE.match(value):
            raise ValueError("use 1-64 letters, digits, '_', '.' or '-'")
        return value


def http_base_url(value: str | None) -> str | None:
    """An OpenAI-style base URL (http(s), with a host), without its trailing slash; None stays None."""
    if value is None:
        return None
    if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname:
        raise ValueError(f"{value!r} must be an http(s) URL such as http://127.0.0.1:8000/v1")
    return value.rstrip("/")


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path inside the container, e.g. /app/{value}")
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid Python regular expression: {exc}") from None
    return value


def _loopback_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} must be an http(s) URL such as http://127.0.0.1:8080/api/state")
    host = parts.hostname
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"host {host!r} is not loopback; state queries stay inside the container "
                             "(use 127.0.0.1 or localhost)")
    return value


AbsolutePath = Annotated[str, AfterValidator(_absolute)]

JSON_PATH_HELP = 'a path such as $.items[0].name, items[0].name or $["key.with.dots"]'
_JSON_PATH_RE = re.compile(r'^\$?(\.?[^.\[\]"]+|\[\d+\]|\["[^"]*"\])*$')


def _json_path(value: str) -> str:
    if not value or not _JSON_PATH_RE.match(value) or value.startswith("."):
        raise ValueError(f"{value!r} is not {JSON_PATH_HELP}")
    return value


class CommandCheck(_Check):
    """Passes when a shell command exits with the expected code."""

    type: Literal["command"] = "command"
    command: str
    """Run with ``bash -c`` as root; ``$FORGE_ROOT`` prefixes absolute paths (empty in the container)."""
    expect_exit: int = 0
    """The exit code that means 'passed'."""
    cwd: AbsolutePath = "/app"
    """Working directory (absolute, inside the container)."""
    timeout_sec: float = Field(60.0, gt=0)
    """Killed (and failed) after this many seconds."""


class FileExistsCheck(_Check):
    """Passes when a path exists (or, with ``absent``, when it does not)."""

    type: Literal["file_exists"] = "file_exists"
    path: AbsolutePath
    """Absolute path inside the container."""
    kind: Literal["file", "dir", "any"] = "file"
    """What must be there: a regular file, a directory, or either."""
    absent: bool = False
    """Invert: pass when nothing is at ``path``."""


class _FileRead(_Check):
    path: AbsolutePath
    """Absolute path of a regular file inside the container (FIFOs and devices are refused)."""
    max_bytes: int = Field(16 * 1024 * 1024, gt=0)
    """A larger file fails the check instead of being read."""


class FileContainsCheck(_FileRead):
    """Passes when a file's text contains a substring."""

    type: Literal["file_contains"] = "file_contains"
    text: str = Field(min_length=1)
    """The substring to find."""
    ignore_case: bool = False
    """Compare case-insensitively."""
    absent: bool = False
    """Invert: pass when the file exists and does not contain ``text``."""


class FileRegexCheck(_FileRead):
    """Passes when a Python regular expression matches a file's text."""

    type: Literal["file_regex"] = "file_regex"
    pattern: Annotated[str, AfterValidator(_regex)] = Field(min_length=1)
    """Python ``re`` syntax; searched anywhere unless ``fullmatch``."""
    fullmatch: bool = False
    """The whole text (trailing newline stripped) must match."""
    ignore_case: bool = False
    """Match case-insensitively."""
    multiline: bool = True
    """``^`` and ``$`` match at every line."""


class JsonPathCheck(_FileRead):
    """Passes when the value at a JSON path in a JSON file equals the expected value."""

    type: Literal["json_path"] = "json_path"
    json_path: Annotated[str, AfterValidator(_json_path)]
    """Where to look: ``$.items[0].name``; ``$`` is the whole document."""
    equals: Any
    """Expected JSON value (numbers compare by value, ``true`` never equals ``1``)."""


class SqliteCheck(_Check):
    """Passes when a read-only SQL query returns the expected rows or scalar."""

    type: Literal["sqlite"] = "sqlite"
    database: AbsolutePath
    """Absolute path of the SQLite file; opened read-only, never created."""
    query: str = Field(min_length=1)
    """One SELECT statement."""
    expect_rows: list[list[Any]] | None = None
    """Every row the query must return (compare with ``ordered``)."""
    expect_scalar: Any = None
    """The single value (first column of the single row) the query must return."""
    ordered: bool = True
    """Rows must come in this order; false compares them as a multiset."""
    timeout_sec: float = Field(10.0, gt=0)
    """The query is interrupted (and failed) after this many seconds."""
    expect: Literal["rows", "scalar"] | None = None
    """Set from which of ``expect_rows`` / ``expect_scalar`` was given; do not write it."""

    @model_validator(mode="after")
    def _one_expectation(self) -> SqliteCheck:
        given = {"expect_rows", "expect_scalar"} & self.model_fields_set
        if len(given) != 1 and self.expect is None:
            raise ValueError("give exactly one of expect_rows (list of rows) or expect_scalar (one value)")
        if self.expect is None:
            self.expect = "rows" if "expect_rows" in given else "scalar"
        if self.expect == "rows" and self.expect_rows is None:
            raise ValueError("expect_rows must be a list of rows, e.g. [[1, \"a\"]]")
        return self


class _UrlCheck(_Check):
    url: str
    """Loopback URL (http://127.0.0.1:PORT/...), or a path such as /api/state with ``base_url_file``."""
    base_url_file: str | None = None
    """File holding the base URL, e.g. /run/forge-webapp/url (apps on a per-container port)."""
    timeout_sec: float = Field(10.0, gt=0)
    """Per-request (or page load) limit."""

    @model_validator(mode="after")
    def _url_shape(self) -> _UrlCheck:
        if self.base_url_file is not None:
            _absolute(self.base_url_file)
            if not self.url.startswith("/"):
                raise ValueError("with base_url_file, url must be a path such as /api/state")
        else:
            _loopback_url(self.url)
        return self


class HttpCheck(_UrlCheck):
    """GETs a loopback URL; passes when status, JSON value and body all match what is given."""

    type: Literal["http"] = "http"
    expect_status: int = 200
    """Required HTTP status code."""
    json_path: str | None = None
    """When set, the body is parsed as JSON and the value here must equal ``equals``."""
    equals: Any = None
    """Expected value at ``json_path``."""
    body_contains: str | None = None
    """When set, the body text must contain this."""

    @model_validator(mode="after")
    def _json_needs_equals(self) -> HttpCheck:
        if self.json_path is not None:
            _json_path(self.json_path)
            if "equals" not in self.model_fields_set:
                raise ValueError("json_path needs equals (the expected value; null is allowed)")
        return self


class DomCheck(_UrlCheck):
    """Loads a page in headless Chromium (Playwright) and checks DOM or accessibility-tree state.

    Needs chromium and the playwright Python package in the image (the gui template).
    """

    type: Literal["dom"] = "dom"
    selector: str | None = None
    """CSS (or any Playwright) selector whose elements are checked."""
    count: int | None = Field(None, ge=0)
    """Exact number of elements ``selector`` must match."""
    text_equals: str | None = None
    """The first match's inner text (stripped) must equal this."""
    text_contains: str | None = None
    """The first match's inner text must contain this."""
    aria_contains: list[str] = Field(default_factory=list)
    """Lines that must appear in the accessibility snapshot (of every element ``selector`` matches,
    else of the body), e.g. ``- heading "Done" [level=1]``."""
    wait_for: str | None = None
    """Selector to wait for (up to ``timeout_sec``) before checking, for pages that render late."""

    @model_validator(mode="after")
    def _something_to_check(self) -> DomCheck:
        element_checks = (self.count, self.text_equals, self.text_contains)
        if self.selector is None and any(c is not None for c in element_checks):
            raise ValueError("count / text_equals / text_contains need a selector")
        if self.selector is None and not self.aria_contains:
            raise ValueError("give a selector (with count / text_*) or aria_contains lines")
        return self


class TestSuiteCheck(_Check):
    """Runs a test suite and scores it from its JUnit XML report (code tasks)."""

    __test__ = False  # not a pytest class
    type: Literal["test_suite"] = "test_suite"
    framework: Literal["pytest", "junit"] = "pytest"
    """pytest: the runner runs ``python3 -m pytest ARGS --junitxml=<fresh file>``;
    junit: it runs ``command`` and reads the report it writes to ``junit_xml``."""
    args: list[str] = Field(default_factory=lambda: ["/tests"])
    """pytest arguments (test paths, ``-k``, ...). Keep the tests in /tests, out of the agent's reach."""
    ini: AbsolutePath | None = None
    """pytest: the config file to use (e.g. /tests/pytest.ini); by default an empty one, so no
    pytest.ini / pyproject.toml / setup.cfg the agent planted above the tests configures the run."""
    confcutdir: AbsolutePath = "/tests"
    """pytest: conftest.py files are only loaded at or below this directory (set /app for a repo's own)."""
    command: str | None = None
    """junit: the shell command that runs the suite."""
    junit_xml: str | None = None
    """junit: where ``command`` writes its report (deleted before the run, so a planted one never counts)."""
    cwd: AbsolutePath = "/app"
    """Working directory for the suite."""
    scoring: Literal["all", "fraction"] = "all"
    """all: reward 1 only if every test passed (and the suite exited 0); fraction: passed / total."""
    expect_total: int | None = Field(None, gt=0)
    """When set, a report with another number of tests fails (tests deleted or not collected)."""
    timeout_sec: float = Field(600.0, gt=0)
    """The suite is killed (and failed) after this many seconds."""

    @model_validator(mode="after")
    def _junit_needs_command(self) -> TestSuiteCheck:
        if self.framework == "junit" and (not self.command or not self.junit_xml):
            raise ValueError("framework 'junit' needs command and junit_xml")
        if self.junit_xml is not None:
            _absolute(self.junit_xml)
        return self


class LlmJudgeCheck(_Check):
    """Asks an OpenAI-compatible model ``votes`` times whether the agent's output meets a rubric."""

    type: Literal["llm_judge"] = "llm_judge"
    base_url: str | None = None
    """The endpoint's base, e.g. http://127.0.0.1:8000/v1 (``/chat/completions`` is appended). Unset: the
    run's judge, through the judge relay (the task then needs ``[verifier] judge = true``; an isolated
    sandbox reaches no other endpoint)."""
    model: str = Field(min_length=1)
    """Pinned model name; recorded in the metrics, and a reply from another model is refused."""
    rubric: str = Field(min_length=1)
    """What a passing answer must do; stored in the task, shown to the judge verbatim."""
    inputs: list[AbsolutePath] = Field(min_length=1)
    """Absolute paths of the files the judge reads (the agent's output)."""
    votes: int = Field(3, ge=1, le=15)
    """How many independent verdicts (k) to ask for."""
    threshold: float = Field(0.5, gt=0, le=1)
    """Fraction of PASS votes needed for reward 1 (with ``scoring: threshold``)."""
    scoring: Literal["threshold", "fraction"] = "threshold"
    """threshold: reward 1 or 0; fraction: the fraction of PASS votes."""
    temperature: float = Field(0.7, ge=0, le=2)
    """Sampling temperature of each vote (above 0, so the k votes are not k copies of one)."""
    max_input_chars: int = Field(20_000, gt=0)
    """Each input is cut to this many characters."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (set it in task.toml [verifier] env)."""
    timeout_sec: float = Field(60.0, gt=0)
    """Per-request limit."""

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        return http_base_url(value)


class _Composite(_Check):
    checks: list[VerifierSpec] = Field(min_length=1)
    """The child checks; each one's metrics appear under its name."""

    @model_validator(mode="after")
    def _unique_names(self) -> _Composite:
        taken: set[str] = {c.name for c in self.checks if c.name is not None}
        if len(taken) != sum(c.name is not None for c in self.checks):
            raise ValueError("two checks share a name; give each a distinct name")
        for child in self.checks:
            if child.name is None:
                child.name = _free_name(child.type, taken)
                taken.add(child.name)
        return self


def _free_name(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


class AllCheck(_Composite):
    """Reward = the lowest child reward (every check must pass)."""

    type: Literal["all"] = "all"


class AnyCheck(_Composite):
    """Reward = the highest child reward (one passing check is enough)."""

    type: Literal["any"] = "any"


class WeightedCheck(_Composite):
    """Reward = weighted mean of the child rewards, optionally cut to 0/1 at ``pass_threshold``."""

    type: Literal["weighted"] = "weighted"
    weights: list[float] | None = None
    """One positive weight per check, in order; equal weights when omitted."""
    pass_threshold: float | None = Field(None, gt=0, le=1)
    """When set, reward is 1 if the weighted mean reaches it, else 0."""

    @model_validator(mode="after")
    def _weights_fit(self) -> WeightedCheck:
        if self.weights is None:
            self.weights = [1.0] * len(self.checks)
        if len(self.weights) != len(self.checks) or any(w <= 0 for w in self.weights):
            raise ValueError(f"weights needs {len(self.checks)} positive numbers, one per check")
        return self


LEAF_TYPES = (CommandCheck, FileExistsCheck, FileContainsCheck, FileRegexCheck, JsonPathCheck, SqliteCheck,
              HttpCheck, DomCheck, TestSuiteCheck, LlmJudgeCheck)
COMPOSITE_TYPES = (AllCheck, AnyCheck, WeightedCheck)

VerifierSpec = Annotated[
    CommandCheck | FileExistsCheck | FileContainsCheck | FileRegexCheck | JsonPathCheck | SqliteCheck | HttpCheck
    | DomCheck | TestSuiteCheck | LlmJudgeCheck | AllCheck | AnyCheck | WeightedCheck,
    Field(discriminator="type"),
]
"""Any verifier: a leaf check or a composition of them."""

for _model in (_Composite, *COMPOSITE_TYPES):
    _model.model_rebuild()
