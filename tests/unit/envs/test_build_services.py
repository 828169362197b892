"""The claw template's local services (forge-services): real SMTP into a Maildir, a real calendar over HTTP."""

from __future__ import annotations

import json
import mailbox
import os
import smtplib
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from openforgerl.envs.render import templates_root

SCRIPT = templates_root() / "claw" / "forge_services.py"


@pytest.fixture
def services(tmp_path: Path):
    env = {**os.environ, "FORGE_SERVICES": "mail calendar", "FORGE_SERVICES_RUN": str(tmp_path / "run"),
           "FORGE_MAIL_ROOT": str(tmp_path / "mail"), "FORGE_CALENDAR_FILE": str(tmp_path / "calendar.json")}
    # run -> services up -> exec the command: a sleep standing in for the container's main process
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "run", "--", "sleep", "60"], env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 15
    while not all((tmp_path / "run" / s).is_file() for s in ("mail", "calendar")):
        assert time.monotonic() < deadline, "services did not publish their addresses"
        time.sleep(0.05)
    yield tmp_path
    os.killpg(proc.pid, 9)
    proc.wait()


def test_mail_sent_over_smtp_lands_in_the_recipients_maildir(services: Path):
    host, port = (services / "run" / "mail").read_text().strip().split(":")
    with smtplib.SMTP(host, int(port), timeout=10) as smtp:
        smtp.sendmail("agent@example.com", ["boss@example.com"],
                      "From: agent@example.com\r\nTo: boss@example.com\r\nSubject: weekly report\r\n\r\nAll done.\r\n")
    [message] = list(mailbox.Maildir(str(services / "mail" / "boss"), create=False))
    assert message["Subject"] == "weekly report" and "All done." in message.get_payload()


def test_calendar_events_are_created_listed_deleted_and_stored(services: Path):
    base = (services / "run" / "calendar").read_text().strip()
    request = urllib.request.Request(f"{base}/events", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"title": "review", "start": "2026-12-01T10:00"}).encode())
    created = json.load(urllib.request.urlopen(request, timeout=10))
    assert [e["title"] for e in json.load(urllib.request.urlopen(f"{base}/events", timeout=10))] == ["review"]
    assert json.loads((services / "calendar.json").read_text())[0]["id"] == created["id"]
    urllib.request.urlopen(urllib.request.Request(f"{base}/events/{created['id']}", method="DELETE"), timeout=10)
    assert json.load(urllib.request.urlopen(f"{base}/events", timeout=10)) == []
