"""The ``office`` asset's state as the families see it, and the checks and effects over it.

Mail: the owner's Maildir (/var/mail/<owner>) is read on the host; a message the agent sends through
the SMTP service lands in /var/mail/<recipient's local part>/, so the mail check reads every mailbox
but the owner's and wants exactly the one expected message there (nothing else sent to anyone).
Calendar: the service keeps its events in /var/lib/forge/calendar.json, rewritten on every change,
so the calendar check reads that file: seeded events that must stay are compared field by field
(with their ids), and the events that must be new (or moved: the service has no update, so a move
is a delete plus a new event) are compared as a multiset without ids.

Invariant: host effects change a copy of the state exactly as the services would (a delivered
message file, a rewritten calendar.json), so the dry run judges the same files the container does.
"""

from __future__ import annotations

import email
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from openforgerl.synth.families.claw.common import host, json_word, python_check, shell_path
from openforgerl.synth.family import Effect

OWNER, OWNER_ADDRESS = "alex", "alex@juniper.example"
SPOOL, CALENDAR = "/var/mail", "/var/lib/forge/calendar.json"
MAILBOX = f"{SPOOL}/{OWNER}"
PROJECTS, TEAM = "/app/docs/projects.json", "/app/docs/team.csv"
EVENT_KEYS = ("title", "start", "end", "location", "attendees")
SERVICES = ("Send mail through the local SMTP server (its host:port is in /run/forge/mail; no login needed). "
            "The team calendar is an HTTP JSON service whose base URL is in /run/forge/calendar: GET /events lists "
            "the events, POST /events with a JSON body such as {\"title\": ..., \"start\": \"YYYY-MM-DDTHH:MM\", "
            "\"end\": ..., \"location\": ..., \"attendees\": [...]} adds one, DELETE /events/<id> removes one "
            "(there is no update: to change an event, delete it and add it again).")


# ---- reading the seeded state --------------------------------------------------------------------

@dataclass(frozen=True)
class Mail:
    """One message of the owner's mailbox."""

    message_id: str
    sender: str
    sender_name: str
    subject: str
    body: str

    @property
    def box(self) -> str:
        """Where the SMTP service delivers mail for the sender."""
        return self.sender.split("@")[0]

    @property
    def invitation(self) -> dict[str, str] | None:
        """Title/start/end/location of a meeting invitation (its Title:, When:, Where: lines), else None."""
        fields = dict(re.findall(r"^(Title|When|Where): (.+)$", self.body, re.M))
        when = re.fullmatch(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2})-(\d{2}:\d{2})", fields.get("When", ""))
        if not when or "Title" not in fields or "Where" not in fields:
            return None
        day, start, end = when.groups()
        return {"title": fields["Title"], "start": f"{day}T{start}", "end": f"{day}T{end}",
                "location": fields["Where"]}


def inbox(state: Path) -> list[Mail]:
    """The owner's messages, oldest first (Maildir file names start with the delivery time)."""
    folder = host(state, MAILBOX)
    paths = sorted((p for sub in ("cur", "new") for p in (folder / sub).glob("*")), key=lambda p: p.name)
    return list(_parsed(tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)))


@functools.lru_cache(maxsize=8)
def _parsed(files: tuple[tuple[str, int, int], ...]) -> tuple[Mail, ...]:
    """The messages of these (path, mtime, size) files: parsed once per unchanged mailbox (parsing is slow)."""
    mails = []
    for path, _, _ in files:
        message = email.message_from_bytes(Path(path).read_bytes(), policy=policy.default)
        name, address = parseaddr(str(message["From"]))
        body = message.get_body(("plain",))
        mails.append(Mail(str(message["Message-ID"]), address.lower(), name, str(message["Subject"]),
                          body.get_content() if body is not None else ""))
    return tuple(mails)


def team(state: Path) -> dict[str, str]:
    """Colleague address -> name (the team directory)."""
    lines = host(state, TEAM).read_text(encoding="utf-8").splitlines()[1:]
    return {line.split(",")[1]: line.split(",")[0] for line in lines if line}


def projects(state: Path) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in json.loads(host(state, PROJECTS).read_text(encoding="utf-8"))}


def events(state: Path) -> list[dict[str, Any]]:
    return list(json.loads(host(state, CALENDAR).read_text(encoding="utf-8")))


def by_mail_id(state: Path, message_id: Any) -> Mail | None:
    return next((m for m in inbox(state) if m.message_id == message_id), None)


# ---- checks --------------------------------------------------------------------------------------

MAIL_CHECK = """import email, json, os, sys
from email import policy
spool, want = sys.argv[1], json.loads(sys.argv[2])
def norm(text):
    return " ".join(str(text).split()).casefold()
def body(message):
    try:
        part = message.get_body(("plain",))
        return part.get_content() if part is not None else ""
    except Exception:
        return ""
found = []
for box in sorted(os.listdir(spool)) if os.path.isdir(spool) else []:
    for sub in ("new", "cur"):
        folder = os.path.join(spool, box, sub)
        for name in sorted(os.listdir(folder)) if box != want["owner"] and os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), "rb") as handle:
                found.append((box, email.message_from_binary_file(handle, policy=policy.default)))
def matches(box, message):
    return (box == want["box"] and norm(message.get("Subject", "")) == norm(want["subject"])
            and want["to"] in str(message.get("To", "")).lower()
            and want["from"] in str(message.get("From", "")).lower()
            and (want["in_reply_to"] is None or str(message.get("In-Reply-To", "")).strip() == want["in_reply_to"])
            and all(norm(text) in norm(body(message)) for text in want["contains"]))
good = sum(matches(box, message) for box, message in found)
print(len(found), "message(s) sent,", good, "as asked:", [(b, str(m.get("Subject"))) for b, m in found][:5])
sys.exit(0 if len(found) == 1 and good == 1 else 1)
"""

CALENDAR_CHECK = """import json, sys
from datetime import datetime
with open(sys.argv[1]) as handle:
    events = json.load(handle)
want = json.loads(sys.argv[2])
def when(text):
    try:
        return datetime.fromisoformat(str(text)).strftime("%Y-%m-%dT%H:%M")
    except ValueError:
        return str(text)
def shape(event, keys):
    out = {k: event.get(k) for k in keys}
    for k in ("start", "end"):
        if k in out:
            out[k] = when(out[k])
    if isinstance(out.get("attendees"), list):
        out["attendees"] = sorted(str(a).strip().lower() for a in out["attendees"])
    return json.dumps(out, sort_keys=True)
keys = ["title", "start", "end", "location", "attendees"]
fixed = {e["id"]: e for e in want["fixed"]}
seen, rest = {}, []
for event in events:
    if event.get("id") in fixed and event.get("id") not in seen:
        seen[event["id"]] = event
    else:
        rest.append(event)
kept = all(i in seen and shape(seen[i], keys) == shape(e, keys) for i, e in fixed.items())
new = sorted(shape(e, keys) for e in rest) == sorted(shape(e, keys) for e in want["new"])
print("seeded events as expected:", kept, "| other events:", [shape(e, keys) for e in rest][:5])
sys.exit(0 if kept and new else 1)
"""


def mail_check(to: str, subject: str, contains: list[str], in_reply_to: str | None = None,
               name: str = "mail") -> dict[str, Any]:
    want = {"owner": OWNER, "box": to.split("@")[0], "to": to.lower(), "from": OWNER_ADDRESS, "subject": subject,
            "in_reply_to": in_reply_to, "contains": contains}
    return python_check(name, MAIL_CHECK, shell_path(SPOOL), json_word(want))


def calendar_check(fixed: list[dict[str, Any]], new: list[dict[str, Any]], name: str = "calendar") -> dict[str, Any]:
    return python_check(name, CALENDAR_CHECK, shell_path(CALENDAR), json_word({"fixed": fixed, "new": new}))


# ---- host effects --------------------------------------------------------------------------------

def sent(to: str, subject: str, body: str, in_reply_to: str | None = None, copies: int = 1) -> Effect:
    """The message as the SMTP service delivers it: a file in /var/mail/<local part>/new."""
    def effect(root: Path) -> None:
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = f"Alex Morgan <{OWNER_ADDRESS}>", to, subject
        if in_reply_to:
            message["In-Reply-To"] = in_reply_to
        message.set_content(body)
        box = host(root, f"{SPOOL}/{to.split('@')[0]}")
        for sub in ("cur", "new", "tmp"):
            (box / sub).mkdir(parents=True, exist_ok=True)
        for copy in range(copies):
            count = len(list((box / "new").iterdir()))
            (box / "new" / f"{1750000000 + count}.M{copy}P1Q1.dry-run").write_bytes(bytes(message))
    return effect


def calendar_edit(remove: Sequence[str] = (), add: Sequence[dict[str, Any]] = ()) -> Effect:
    """Delete the events with the ``remove`` ids, then add ``add`` (as the service would: appended, saved)."""
    def effect(root: Path) -> None:
        store = host(root, CALENDAR)
        current = [e for e in json.loads(store.read_text(encoding="utf-8")) if e.get("id") not in remove]
        for number, event in enumerate(add):
            current.append({**event, "id": event.get("id") or f"dry{number:09d}"})
        store.write_text(json.dumps(current, indent=2))
    return effect


# ---- solutions -----------------------------------------------------------------------------------

SOLUTION_HEAD = """forge-services wait
python3 - <<'PY'
import email, json, smtplib, urllib.request
from email import policy
from email.message import EmailMessage
from pathlib import Path

def inbox():
    for path in sorted(p for sub in ("cur", "new") for p in Path("/var/mail/alex", sub).iterdir()):
        yield email.message_from_bytes(path.read_bytes(), policy=policy.default)

def send(to, subject, body, in_reply_to=None):
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "Alex Morgan <alex@juniper.example>", to, subject
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    message.set_content(body)
    host, port = open("/run/forge/mail").read().strip().rsplit(":", 1)
    with smtplib.SMTP(host, int(port), timeout=30) as smtp:
        smtp.send_message(message)

def call(method, path, body=None):
    base = open("/run/forge/calendar").read().strip()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)

"""


def solution(body: str) -> str:
    """solve.sh: wait for the services, then run ``body`` with the helpers inbox(), send() and call()."""
    return SOLUTION_HEAD + body.strip("\n") + "\nPY\n"
