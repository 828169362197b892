#!/usr/bin/env python3
"""forge-services: the small real local services a claw task can ask for (Python stdlib only).

    forge-services run [--] CMD...   start the services named in $FORGE_SERVICES, then exec CMD
    forge-services wait              return once every service in $FORGE_SERVICES is up
    forge-services mail | calendar   run one service in the foreground

``mail``: an SMTP server; every message is delivered into the Maildir /var/mail/<recipient's
local part>/ (read it with Python's ``mailbox.Maildir``). ``calendar``: an HTTP JSON service —
GET /events, POST /events {"title", "start", "end", ...} -> {"id", ...}, GET|DELETE /events/<id> —
stored in /var/lib/forge/calendar.json (seeded from that file when it exists at start).

Containers share the host's network, so each service binds 127.0.0.1 on a free port and, once it
accepts connections, writes its address to /run/forge/<service> (``127.0.0.1:PORT`` for mail,
``http://127.0.0.1:PORT`` for calendar). Invariant: ``run`` execs CMD only after every requested
service has published its address. ``docker exec`` does not wait for the entrypoint, so a
script that runs the instant a container starts (solve.sh under the oracle) calls ``wait`` first.
"""

import json
import mailbox
import os
import socketserver
import sys
import threading
import time
import uuid
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUN_DIR = Path(os.environ.get("FORGE_SERVICES_RUN", "/run/forge"))
MAIL_ROOT = Path(os.environ.get("FORGE_MAIL_ROOT", "/var/mail"))
CALENDAR_FILE = Path(os.environ.get("FORGE_CALENDAR_FILE", "/var/lib/forge/calendar.json"))
START_TIMEOUT_S = 15


def publish(service, address):
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    tmp = RUN_DIR / f".{service}.tmp"
    tmp.write_text(address + "\n")
    tmp.replace(RUN_DIR / service)


# ---- mail: SMTP in, Maildir out ----------------------------------------------------------------

class SMTPHandler(socketserver.StreamRequestHandler):
    def reply(self, line):
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self):
        self.reply("220 forge-mail ESMTP")
        sender, recipients = None, []
        for raw in self.rfile:
            verb, _, arg = raw.decode("utf-8", "replace").strip().partition(" ")
            verb = verb.upper()
            if verb in ("HELO", "EHLO"):
                self.reply("250 forge-mail")
            elif verb == "MAIL":
                sender, recipients = arg.partition(":")[2].strip(" <>"), []
                self.reply("250 OK")
            elif verb == "RCPT":
                recipients.append(arg.partition(":")[2].strip(" <>"))
                self.reply("250 OK")
            elif verb == "DATA":
                if not recipients:
                    self.reply("503 need RCPT first")
                    continue
                self.reply("354 end data with <CR><LF>.<CR><LF>")
                deliver(self.read_data(), sender, recipients)
                self.reply("250 OK delivered")
            elif verb == "RSET":
                sender, recipients = None, []
                self.reply("250 OK")
            elif verb == "NOOP":
                self.reply("250 OK")
            elif verb == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("502 command not implemented")

    def read_data(self):
        lines = []
        for raw in self.rfile:
            if raw.rstrip(b"\r\n") == b".":
                break
            lines.append(raw[1:] if raw.startswith(b"..") else raw)
        return b"".join(lines)


def deliver(data, sender, recipients):
    message = message_from_bytes(data, policy=policy.compat32)
    if sender and "Return-Path" not in message:
        message["Return-Path"] = f"<{sender}>"
    MAIL_ROOT.mkdir(parents=True, exist_ok=True)
    for recipient in recipients:
        user = recipient.split("@")[0] or "postmaster"
        box = MAIL_ROOT / user
        mailbox.Maildir(str(box), create=True).add(message)
        own(box, user)


def own(box, user):
    """A local user's mail is theirs to read (like a real MTA); everyone else's stays root's."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return
    if os.geteuid() == 0:
        for path in [box, *box.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)


def serve_mail():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), SMTPHandler)
    server.daemon_threads = True
    publish("mail", f"127.0.0.1:{server.server_address[1]}")
    server.serve_forever()


# ---- calendar: a JSON event store over HTTP ----------------------------------------------------

class Calendar:
    def __init__(self, path):
        self.path, self.lock = path, threading.Lock()
        self.events = json.loads(path.read_text()) if path.is_file() else []

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.events, indent=2))
        tmp.replace(self.path)

    def add(self, event):
        with self.lock:
            event = {**event, "id": event.get("id") or uuid.uuid4().hex[:12]}
            self.events.append(event)
            self.save()
            return event

    def remove(self, event_id):
        with self.lock:
            kept = [e for e in self.events if e.get("id") != event_id]
            found, self.events = len(kept) != len(self.events), kept
            self.save()
            return found


class CalendarHandler(BaseHTTPRequestHandler):
    calendar = None

    def send_json(self, status, data):
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def event_id(self):
        parts = self.path.strip("/").split("/")
        return parts[1] if len(parts) == 2 and parts[0] == "events" else None

    def do_GET(self):
        if self.path.rstrip("/") == "/events":
            return self.send_json(200, self.calendar.events)
        match = [e for e in self.calendar.events if e.get("id") == self.event_id()]
        self.send_json(200, match[0]) if match else self.send_json(404, {"error": "no such event"})

    def do_POST(self):
        if self.path.rstrip("/") != "/events":
            return self.send_json(404, {"error": "POST /events"})
        try:
            event = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self.send_json(400, {"error": "body must be JSON"})
        if not isinstance(event, dict) or not all(k in event for k in ("title", "start")):
            return self.send_json(400, {"error": "an event needs at least title and start"})
        self.send_json(201, self.calendar.add(event))

    def do_DELETE(self):
        found = self.calendar.remove(self.event_id())
        self.send_json(200, {"deleted": True}) if found else self.send_json(404, {"error": "no such event"})

    def log_message(self, *args):
        pass


def serve_calendar():
    CalendarHandler.calendar = Calendar(CALENDAR_FILE)
    server = ThreadingHTTPServer(("127.0.0.1", 0), CalendarHandler)
    publish("calendar", f"http://127.0.0.1:{server.server_address[1]}")
    server.serve_forever()


# ---- run: start the requested services, wait for them, exec the container's command -----------

SERVICES = {"mail": serve_mail, "calendar": serve_calendar}


def wanted_services():
    wanted = os.environ.get("FORGE_SERVICES", "").split()
    unknown = [name for name in wanted if name not in SERVICES]
    if unknown:
        sys.exit(f"forge-services: unknown service(s) {unknown} (known: {', '.join(SERVICES)})")
    return wanted


def wait(wanted):
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all((RUN_DIR / name).is_file() for name in wanted):
        if time.monotonic() > deadline:
            sys.exit(f"forge-services: {wanted} did not start within {START_TIMEOUT_S} s")
        time.sleep(0.05)


def run(command):
    import subprocess

    wanted = wanted_services()
    for name in wanted:
        (RUN_DIR / name).unlink(missing_ok=True)
        subprocess.Popen([sys.executable, os.path.abspath(__file__), name], stdin=subprocess.DEVNULL)
    wait(wanted)
    if command:
        os.execvp(command[0], command)


def main(argv):
    if argv and argv[0] == "run":
        rest = argv[1:]
        return run(rest[1:] if rest[:1] == ["--"] else rest)
    if argv == ["wait"]:
        return wait(wanted_services())
    if len(argv) == 1 and argv[0] in SERVICES:
        return SERVICES[argv[0]]()
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
