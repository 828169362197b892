#!/usr/bin/env python3
"""Seeds the ``office`` state: Alex Morgan's mailbox, team calendar and work documents.

    python3 seed.py --root ROOT      (ROOT is / at image build, a host directory for dry runs)

Writes ROOT/var/mail/alex/ (a Maildir of 20 messages: status mails, invoices, newsletters and meeting
invitations whose body lists ``Title:``, ``When:`` and ``Where:``), ROOT/var/lib/forge/calendar.json
(the calendar service's store, in the service's own format) and ROOT/app/docs/ (projects.json,
team.csv, rooms.md). Stdlib only. Invariant: every byte written is a pure function of the tables
below (fixed names, dates and ids), so the image and every host copy start from the same state.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

DOMAIN = "juniper.example"
ME = ("Alex Morgan", f"alex@{DOMAIN}")
TEAM = [("Dana Lee", "dana.lee", "Project manager", "Delivery"),
        ("Omar Haddad", "omar.haddad", "Buyer", "Procurement"),
        ("Ines Costa", "ines.costa", "Office manager", "Operations"),
        ("Ravi Patel", "ravi.patel", "Security lead", "Platform"),
        ("Mei Chen", "mei.chen", "Engineering manager", "Platform"),
        ("Lukas Berg", "lukas.berg", "Data engineer", "Platform"),
        ("Sara Nilsen", "sara.nilsen", "Product manager", "Delivery"),
        ("Tariq Aziz", "tariq.aziz", "Accountant", "Finance")]
PROJECTS = [
    {"code": "PRJ-104", "name": "Falcon", "owner": "dana.lee", "budget_eur": 48200, "due": "2025-04-30",
     "status": "at risk"},
    {"code": "PRJ-117", "name": "Heron", "owner": "sara.nilsen", "budget_eur": 31500, "due": "2025-03-28",
     "status": "on track"},
    {"code": "PRJ-121", "name": "Kestrel", "owner": "mei.chen", "budget_eur": 76900, "due": "2025-06-15",
     "status": "on track"},
    {"code": "PRJ-126", "name": "Osprey", "owner": "lukas.berg", "budget_eur": 12750, "due": "2025-05-09",
     "status": "blocked"},
    {"code": "PRJ-130", "name": "Plover", "owner": "ravi.patel", "budget_eur": 22400, "due": "2025-04-11",
     "status": "on track"},
]
ROOMS = [("Fjord", 8, "2nd floor, video wall"), ("Glacier", 4, "2nd floor"), ("Tundra", 12, "3rd floor, projector"),
         ("Summit", 20, "ground floor, auditorium seating")]

INVITE = "Hi Alex,\n\n{intro}\n\nTitle: {title}\nWhen: {day} {start}-{end}\nWhere: {where}\n\nThanks,\n{first}\n"
# (sender local part, sender name, subject, date header, body or invitation fields, unread)
MESSAGES = [
    ("dana.lee", "Dana Lee", "Falcon budget review", "Mon, 03 Mar 2025 09:12:00 +0000",
     "Hi Alex,\n\nFalcon is at 71% of its budget with six weeks to go.\nCan you check the vendor invoices?\n\n"
     "Dana\n", False),
    ("omar.haddad", "Omar Haddad", "Vendor demo with Brightline", "Mon, 03 Mar 2025 11:40:00 +0000",
     {"intro": "Brightline offered a demo of their scheduling tool.", "title": "Brightline demo",
      "day": "2025-03-12", "start": "14:00", "end": "15:00", "where": "Fjord"}, False),
    ("ines.costa", "Ines Costa", "Offsite venue options", "Mon, 03 Mar 2025 15:05:00 +0000",
     "Hi Alex,\n\nThree venues replied: Harbor Loft (45 seats), Pine Hall (60 seats), Old Mill (30 seats).\n"
     "Pine Hall is the only one free on 2025-04-24.\n\nInes\n", False),
    ("billing", "CloudHost Billing", "Invoice CH-2291 for February", "Tue, 04 Mar 2025 00:10:00 +0000",
     "Invoice CH-2291\nPeriod: 2025-02-01 to 2025-02-28\nAmount due: 1843.20 EUR\nDue date: 2025-03-20\n", False),
    ("ravi.patel", "Ravi Patel", "Security training dry run", "Tue, 04 Mar 2025 08:30:00 +0000",
     {"intro": "I'd like a dry run of the phishing training before it goes out.",
      "title": "Security training dry run", "day": "2025-03-13", "start": "10:00", "end": "11:30",
      "where": "Tundra"}, False),
    ("mei.chen", "Mei Chen", "Q1 hiring plan draft", "Tue, 04 Mar 2025 13:22:00 +0000",
     "Hi Alex,\n\nThe draft plan has two backend roles and one data role.\nThe budget line is 210000 EUR.\n\n"
     "Mei\n", False),
    ("newsletter", "Industry Weekly", "Industry Weekly #112", "Wed, 05 Mar 2025 06:00:00 +0000",
     "In this issue: scheduling tools compared, five tips for hybrid offsites, and our reader survey.\n", False),
    ("lukas.berg", "Lukas Berg", "Lunch and learn: pgvector", "Wed, 05 Mar 2025 10:15:00 +0000",
     {"intro": "I can present what we learned indexing embeddings in Postgres.",
      "title": "Lunch and learn: pgvector", "day": "2025-03-19", "start": "12:00", "end": "13:00",
      "where": "Summit"}, False),
    ("sara.nilsen", "Sara Nilsen", "Heron launch checklist", "Wed, 05 Mar 2025 16:48:00 +0000",
     "Hi Alex,\n\nThe Heron checklist has 14 items; 11 are done.\nOpen: legal review, pricing page, support "
     "runbook.\n\nSara\n", False),
    ("facilities", "Facilities", "Fire drill on 2025-03-14", "Thu, 06 Mar 2025 07:55:00 +0000",
     "A fire drill takes place on 2025-03-14 at 11:00. Assemble at point B in the car park.\n", False),
    ("dana.lee", "Dana Lee", "Falcon risk workshop", "Thu, 06 Mar 2025 09:02:00 +0000",
     {"intro": "Let's go through the Falcon risk register together.", "title": "Falcon risk workshop",
      "day": "2025-03-17", "start": "15:00", "end": "16:30", "where": "Glacier"}, False),
    ("it-helpdesk", "IT Helpdesk", "Laptop refresh schedule", "Thu, 06 Mar 2025 12:30:00 +0000",
     "Your laptop refresh slot is 2025-03-25 at 09:30 at the IT desk. Bring your charger.\n", False),
    ("omar.haddad", "Omar Haddad", "Vendor contract renewal", "Fri, 07 Mar 2025 10:10:00 +0000",
     "Hi Alex,\n\nThe Brightline contract renews on 2025-04-01 at 9600 EUR per year.\nShall I negotiate?\n\n"
     "Omar\n", False),
    ("hr", "People Team", "Benefits enrollment closes 2025-03-28", "Fri, 07 Mar 2025 14:00:00 +0000",
     "Reminder: benefits enrollment closes on 2025-03-28. Choose your plan in the HR portal.\n", False),
    ("ines.costa", "Ines Costa", "Offsite planning call", "Fri, 07 Mar 2025 15:35:00 +0000",
     {"intro": "Can we pick the offsite venue and agenda together?", "title": "Offsite planning call",
      "day": "2025-03-18", "start": "09:30", "end": "10:00", "where": "Glacier"}, True),
    ("support", "TicketDesk Support", "Ticket #4471 resolved", "Sat, 08 Mar 2025 08:20:00 +0000",
     "Ticket #4471 (projector in Tundra flickers) was resolved: the HDMI cable was replaced.\n", True),
    ("ravi.patel", "Ravi Patel", "Incident report INC-0312", "Sun, 09 Mar 2025 19:45:00 +0000",
     "Hi Alex,\n\nINC-0312: the VPN was down for 38 minutes on 2025-03-09.\nRoot cause: an expired certificate.\n\n"
     "Ravi\n", True),
    ("mei.chen", "Mei Chen", "Interview debrief: backend role", "Mon, 10 Mar 2025 08:05:00 +0000",
     {"intro": "We finished the backend interviews; let's decide.", "title": "Backend interview debrief",
      "day": "2025-03-14", "start": "16:00", "end": "16:45", "where": "Fjord"}, True),
    ("travel", "Travel Desk", "Your trip to Oslo is booked", "Mon, 10 Mar 2025 09:40:00 +0000",
     "Flight JU 412 leaves on 2025-03-26 at 07:15. Hotel: Fjordview, 2 nights.\n", True),
    ("sara.nilsen", "Sara Nilsen", "Heron go/no-go", "Mon, 10 Mar 2025 10:25:00 +0000",
     {"intro": "Time for the Heron launch decision.", "title": "Heron go/no-go", "day": "2025-03-20",
      "start": "11:00", "end": "11:45", "where": "Tundra"}, True),
]
# (title, day, start, end, room, attendees' local parts)
EVENTS = [
    ("Ops sync (week 11)", "2025-03-10", "09:00", "09:30", "Fjord", ["dana.lee", "ines.costa", "omar.haddad"]),
    ("Budget check-in", "2025-03-10", "11:00", "12:00", "Glacier", ["tariq.aziz"]),
    ("1:1 with Dana", "2025-03-10", "14:00", "14:30", "Glacier", ["dana.lee"]),
    ("Supplier call: Northwind", "2025-03-11", "09:00", "10:00", "Fjord", ["omar.haddad"]),
    ("Heron pricing review", "2025-03-11", "13:00", "14:00", "Tundra", ["sara.nilsen", "tariq.aziz"]),
    ("Platform roadmap", "2025-03-12", "09:30", "11:00", "Tundra", ["mei.chen", "lukas.berg", "ravi.patel"]),
    ("Office walkthrough", "2025-03-12", "16:00", "16:30", "Summit", ["ines.costa"]),
    ("Quarterly numbers prep", "2025-03-13", "09:00", "10:00", "Glacier", ["tariq.aziz"]),
    ("1:1 with Mei", "2025-03-13", "14:30", "15:00", "Glacier", ["mei.chen"]),
    ("All hands", "2025-03-14", "09:00", "10:00", "Summit", ["dana.lee", "mei.chen", "sara.nilsen", "ravi.patel"]),
    ("Ops sync (week 12)", "2025-03-17", "09:00", "09:30", "Fjord", ["dana.lee", "ines.costa", "omar.haddad"]),
    ("Vendor scorecards", "2025-03-17", "10:30", "11:30", "Fjord", ["omar.haddad"]),
    ("Security review", "2025-03-18", "13:00", "14:30", "Tundra", ["ravi.patel", "lukas.berg"]),
    ("Team lunch", "2025-03-19", "12:30", "13:30", "Summit", ["ines.costa", "sara.nilsen", "lukas.berg"]),
    ("Kestrel demo", "2025-03-20", "15:00", "16:00", "Tundra", ["mei.chen", "dana.lee"]),
    ("Month-end close", "2025-03-21", "10:00", "12:00", "Glacier", ["tariq.aziz", "dana.lee"]),
]


def address(local: str) -> str:
    return f"{local}@{local_domain(local)}"


def local_domain(local: str) -> str:
    outside = {"billing": "cloudhost.example", "newsletter": "industryweekly.example",
               "support": "ticketdesk.example"}
    return outside.get(local, DOMAIN)


def message_text(number: int, entry: tuple) -> str:
    local, name, subject, date, body, _ = entry
    if isinstance(body, dict):
        body = INVITE.format(first=name.split()[0], **body)
    return (f"Return-Path: <{address(local)}>\nFrom: {name} <{address(local)}>\nTo: {ME[0]} <{ME[1]}>\n"
            f"Subject: {subject}\nDate: {date}\nMessage-ID: <msg-{number:03d}.{local}@{local_domain(local)}>\n"
            f"MIME-Version: 1.0\nContent-Type: text/plain; charset=us-ascii\nContent-Transfer-Encoding: 7bit\n\n"
            f"{body}")


def write_mailbox(root: Path) -> None:
    box = root / "var" / "mail" / "alex"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True, exist_ok=True)
    for number, entry in enumerate(MESSAGES, start=1):
        unread = entry[5]
        name = f"{1741000000 + number * 3600}.M{number}P100Q1.office" + ("" if unread else ":2,S")
        (box / ("new" if unread else "cur") / name).write_bytes(message_text(number, entry).encode("ascii"))


def calendar_events() -> list[dict]:
    return [{"id": f"evt-{number:03d}", "title": title, "start": f"{day}T{start}", "end": f"{day}T{end}",
             "location": room, "attendees": [address(a) for a in attendees]}
            for number, (title, day, start, end, room, attendees) in enumerate(EVENTS, start=1)]


def documents() -> dict[str, str]:
    projects = [{**p, "owner": address(str(p["owner"]))} for p in PROJECTS]
    team = io.StringIO()
    writer = csv.writer(team, lineterminator="\n")
    writer.writerow(["name", "email", "role", "team"])
    writer.writerows([name, address(local), role, unit] for name, local, role, unit in TEAM)
    rooms = "# Meeting rooms\n\n| room | seats | where |\n|---|---|---|\n"
    rooms += "".join(f"| {name} | {seats} | {where} |\n" for name, seats, where in ROOMS)
    readme = (f"# Alex Morgan's office workspace\n\nYou are {ME[0]} <{ME[1]}>, operations lead at Juniper & Co.\n"
              "Your mail is the Maildir /var/mail/alex; the team calendar is the calendar service.\n"
              "docs/ holds the project list, the team directory and the meeting rooms.\n")
    return {"README.md": readme, "docs/projects.json": json.dumps(projects, indent=2) + "\n",
            "docs/team.csv": team.getvalue(), "docs/rooms.md": rooms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the sandbox's / (a host directory for dry runs)")
    root = Path(parser.parse_args().root)
    write_mailbox(root)
    store = root / "var" / "lib" / "forge" / "calendar.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(calendar_events(), indent=2))  # the service's own format
    for relative, text in documents().items():
        target = root / "app" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


if __name__ == "__main__":
    main()
