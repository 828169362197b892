"""Calendar families of the ``office`` asset: create, move, delete, schedule into a free slot, and accept an
emailed invitation (calendar + reply).

Everything goes through the calendar service (its store /var/lib/forge/calendar.json is what the check
reads). Invariant: the check compares the whole calendar — every seeded event that must stay, field by
field, plus exactly the events that must be new — so a missed change, a duplicate or a deleted
neighbour scores 0.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.claw.common import both, strongest
from openforgerl.synth.families.claw.mail import describe
from openforgerl.synth.families.claw.office import (
    EVENT_KEYS,
    OWNER_ADDRESS,
    SERVICES,
    by_mail_id,
    calendar_check,
    calendar_edit,
    events,
    inbox,
    mail_check,
    sent,
    solution,
    team,
)
from openforgerl.synth.family import Effect, Family, TaskDraft
from openforgerl.tasks import Domain

TITLES = ["Coffee with Tariq", "Budget deep dive", "Vendor negotiation prep", "Onboarding plan for the new buyer",
          "Quarterly planning", "Desk move planning", "Interview: data engineer", "Offsite agenda review",
          "Printer fleet review", "Travel policy update", "Risk register review", "Licence audit"]
ROOMS = ["Fjord", "Glacier", "Tundra", "Summit"]
DAYS = [f"2025-03-{d:02d}" for d in (10, 11, 12, 13, 14, 17, 18, 19, 20, 21)]
OPEN, CLOSE = "09:00", "17:00"
LENGTHS = [30, 45, 60, 90]


def at(day: str, clock: str, minutes: int = 0) -> str:
    return (datetime.fromisoformat(f"{day}T{clock}") + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M")


def minutes_between(start: str, end: str) -> int:
    return int((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds() // 60)


def shaped(event: dict[str, Any]) -> dict[str, Any]:
    return {k: event[k] for k in EVENT_KEYS if k in event}


def post_code(event: dict[str, Any]) -> str:
    return f"call('POST', '/events', {shaped(event)!r})\n"


def event_words(event: dict[str, Any]) -> str:
    people = ", ".join(event["attendees"])
    return (f"title `{event['title']}`, start {event['start']}, end {event['end']}, location `{event['location']}` "
            f"and attendees {people}")


def titled(state: Path, title: Any) -> dict[str, Any] | None:
    return next((e for e in events(state) if e["title"] == title), None)


class Create(Family):
    """Add one fully specified event."""

    name = "claw.calendar.create"
    domain: ClassVar[Domain] = "claw"
    description = "Add an event (title, start, end, location, attendees) through the calendar service."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        day, length = rng.choice(DAYS), rng.choice(LENGTHS)
        start = at(day, OPEN, 30 * rng.randrange(0, (480 - length) // 30 + 1))
        people = sorted(rng.sample(sorted(team(state)), rng.randint(1, 3)))
        return {"title": rng.choice(TITLES), "start": start, "end": at(start[:10], start[11:], length),
                "location": rng.choice(ROOMS), "attendees": people}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title", "start", "end", "location", "attendees"], "properties": {
            "title": {"type": "string", "minLength": 3, "maxLength": 60}, "start": {"type": "string"},
            "end": {"type": "string"}, "location": {"enum": ROOMS},
            "attendees": {"type": "array", "minItems": 1, "items": {"enum": sorted(team(state))}}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        return event_error(params, state)

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        event = shaped(params)
        seeded = events(state)
        instruction = (f"Add this event to the team calendar: {event_words(event)}. Leave every other event as it "
                       f"is. {SERVICES}")
        later = {**event, "start": at(event["start"][:10], event["start"][11:], 60),
                 "end": at(event["end"][:10], event["end"][11:], 60)}
        failures: dict[str, Effect] = {"wrong_time": calendar_edit(add=[later]),
                                       "added_twice": calendar_edit(add=[event, event]),
                                       "neighbour_deleted": calendar_edit(remove=[seeded[0]["id"]], add=[event])}
        if len(event["attendees"]) > 1:
            failures["attendee_missing"] = calendar_edit(add=[{**event, "attendees": event["attendees"][:-1]}])
        return TaskDraft(
            title=f"Add {event['title']!r} on {event['start'][:10]}", instruction=instruction,
            spec=calendar_check(seeded, [event]), solution=solution(post_code(event)),
            required_literals=[event["title"], event["start"], event["end"], event["location"], *event["attendees"]],
            oracle=calendar_edit(add=[event]),
            failure_cases=strongest(failures, "neighbour_deleted", "wrong_time", "added_twice", "attendee_missing"),
            difficulty="easy", needed_actions=["run"])


def event_error(params: dict[str, Any], state: Path) -> str | None:
    """Why a proposed new event is not one the calendar can hold, or None."""
    try:
        start, end = datetime.fromisoformat(str(params.get("start"))), datetime.fromisoformat(str(params.get("end")))
    except ValueError:
        return "start and end must be YYYY-MM-DDTHH:MM times"
    if not start < end or start.date() != end.date() or str(params.get("start"))[:10] not in DAYS:
        return f"the event must end after it starts, on one of {DAYS[0]} to {DAYS[-1]}"
    if str(params.get("title", "")).strip() in {e["title"] for e in events(state)} or len(
            str(params.get("title", "")).strip()) < 3:
        return f"the title {params.get('title')!r} must be new to the calendar and at least 3 characters"
    attendees = params.get("attendees")
    if not isinstance(attendees, list) or not attendees or any(a not in team(state) for a in attendees):
        return f"attendees must be colleagues from the team directory, got {attendees!r}"
    if params.get("location") not in ROOMS:
        return f"location must be a meeting room of {ROOMS}, got {params.get('location')!r}"
    return None


class Move(Family):
    """Move one event to another start, keeping its length and everything else."""

    name = "claw.calendar.move"
    domain: ClassVar[Domain] = "claw"
    description = "Move an existing event to a new start time (same length, title, room and attendees)."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        event = rng.choice(events(state))
        length = minutes_between(event["start"], event["end"])
        while True:
            start = at(rng.choice(DAYS), OPEN, 30 * rng.randrange(0, (480 - length) // 30 + 1))
            if start != event["start"]:
                return {"title": event["title"], "new_start": start}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title", "new_start"], "properties": {
            "title": {"enum": [e["title"] for e in events(state)]}, "new_start": {"type": "string"}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        event = titled(state, params.get("title"))
        if event is None:
            return f"there is no event titled {params.get('title')!r} in the calendar"
        try:
            start = datetime.fromisoformat(str(params.get("new_start")))
        except ValueError:
            return "new_start must be a YYYY-MM-DDTHH:MM time"
        if str(params["new_start"])[:10] not in DAYS or start.strftime("%Y-%m-%dT%H:%M") == event["start"]:
            return f"new_start must differ from the event's start and fall on one of {DAYS[0]} to {DAYS[-1]}"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        seeded = events(state)
        event = next(e for e in seeded if e["title"] == params["title"])
        start = datetime.fromisoformat(params["new_start"]).strftime("%Y-%m-%dT%H:%M")
        end = at(start[:10], start[11:], minutes_between(event["start"], event["end"]))
        moved = {**shaped(event), "start": start, "end": end}
        others = [e for e in seeded if e["id"] != event["id"]]
        instruction = (
            f"Move the team calendar event `{event['title']}` (now from {event['start']} to {event['end']}) so that it "
            f"starts at {start} and ends at {end}, keeping its title, location and attendees. Leave every other "
            f"event as it is. {SERVICES}")
        failures: dict[str, Effect] = {
            "deleted_only": calendar_edit(remove=[event["id"]]),
            "copied_not_moved": calendar_edit(add=[moved]),
            "details_lost": calendar_edit(remove=[event["id"]], add=[{**moved, "location": "", "attendees": []}]),
            "other_event_moved": calendar_edit(remove=[others[0]["id"]], add=[
                {**shaped(others[0]), "start": start, "end": end}])}
        code = f"""event = next(e for e in call('GET', '/events') if e['title'] == {event['title']!r})
call('DELETE', '/events/' + event['id'])
call('POST', '/events', {{**event, 'start': {start!r}, 'end': {end!r}}})
"""
        return TaskDraft(
            title=f"Move {event['title']!r} to {start}", instruction=instruction,
            spec=calendar_check(others, [moved]), solution=solution(code),
            required_literals=[f"`{event['title']}`", start, end], oracle=calendar_edit(remove=[event["id"]],
                                                                                       add=[moved]),
            failure_cases=strongest(failures, "copied_not_moved", "details_lost", "deleted_only", "other_event_moved"),
            difficulty="medium", needed_actions=["run"])


class Delete(Family):
    """Delete one event; its neighbours stay."""

    name = "claw.calendar.delete"
    domain: ClassVar[Domain] = "claw"
    description = "Delete one event from the team calendar."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"title": rng.choice(events(state))["title"]}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title"], "properties": {
            "title": {"enum": [e["title"] for e in events(state)]}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if titled(state, params.get("title")) is None:
            return f"there is no event titled {params.get('title')!r} in the calendar"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        seeded = events(state)
        event = next(e for e in seeded if e["title"] == params["title"])
        others = [e for e in seeded if e["id"] != event["id"]]
        same_day = [e["id"] for e in seeded if e["start"][:10] == event["start"][:10]]
        instruction = (f"Delete the event `{event['title']}` (on {event['start'][:10]}, from {event['start'][11:]} to "
                       f"{event['end'][11:]}) from the team calendar. Leave every other event as it is. {SERVICES}")
        failures: dict[str, Effect] = {"wrong_event": calendar_edit(remove=[others[0]["id"]]),
                                       "every_event_deleted": calendar_edit(remove=[e["id"] for e in seeded])}
        if len(same_day) > 1:
            failures["whole_day_deleted"] = calendar_edit(remove=same_day)
        code = f"""event = next(e for e in call('GET', '/events') if e['title'] == {event['title']!r})
call('DELETE', '/events/' + event['id'])
"""
        return TaskDraft(
            title=f"Delete {event['title']!r}", instruction=instruction, spec=calendar_check(others, []),
            solution=solution(code), required_literals=[f"`{event['title']}`", event["start"][:10]],
            oracle=calendar_edit(remove=[event["id"]]),
            failure_cases=strongest(failures, "whole_day_deleted", "wrong_event", "every_event_deleted"),
            difficulty="easy",
            needed_actions=["run"])


def free_starts(seeded: list[dict[str, Any]], day: str, length: int) -> list[str]:
    """Half-hour starts on ``day`` whose slot of ``length`` minutes fits the working day and meets no event."""
    busy = [(e["start"], e["end"]) for e in seeded if e["start"][:10] == day]
    starts = [at(day, OPEN, 30 * step) for step in range(0, (480 - length) // 30 + 1)]
    return [s for s in starts if not any(s < end and at(s[:10], s[11:], length) > begin for begin, end in busy)]


class Schedule(Family):
    """Book an event into the first free slot of a day (the rule in the instruction; the time derived)."""

    name = "claw.calendar.schedule"
    domain: ClassVar[Domain] = "claw"
    description = "Book an event at the earliest free half-hour start of a given day."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        seeded = events(state)
        busy_days = sorted({e["start"][:10] for e in seeded if e["start"][11:] == OPEN})
        day, length = rng.choice(busy_days), rng.choice(LENGTHS)
        return {"title": rng.choice(TITLES), "day": day, "minutes": length, "location": rng.choice(ROOMS),
                "attendees": sorted(rng.sample(sorted(team(state)), rng.randint(1, 2)))}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["title", "day", "minutes", "location", "attendees"], "properties": {
            "title": {"type": "string", "minLength": 3, "maxLength": 60}, "day": {"enum": DAYS},
            "minutes": {"enum": LENGTHS}, "location": {"enum": ROOMS},
            "attendees": {"type": "array", "minItems": 1, "items": {"enum": sorted(team(state))}}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("day") not in DAYS or params.get("minutes") not in LENGTHS:
            return f"day must be one of {DAYS} and minutes one of {LENGTHS}"
        if not free_starts(events(state), params["day"], params["minutes"]):
            return f"{params['day']} has no free slot of {params['minutes']} minutes"
        start = at(params["day"], OPEN)
        return event_error({**params, "start": start, "end": at(params["day"], OPEN, 30)}, state)

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        seeded, day, length = events(state), params["day"], params["minutes"]
        free = free_starts(seeded, day, length)
        start = free[0]
        event = {"title": params["title"], "start": start, "end": at(day, start[11:], length),
                 "location": params["location"], "attendees": sorted(params["attendees"])}
        instruction = (
            f"Book a {length}-minute event titled `{event['title']}` on {day} in the team calendar, at the earliest "
            f"start time on the hour or half hour, from {OPEN} on, at which it ends by {CLOSE} and overlaps no other "
            f"event of that day (an event ending at 10:00 leaves 10:00 free). Set its location to "
            f"`{event['location']}` and its attendees to {', '.join(event['attendees'])}. Leave every other event as "
            f"it is. {SERVICES}")
        failures: dict[str, Effect] = {"last_free_slot": calendar_edit(add=[{
            **event, "start": free[-1], "end": at(day, free[-1][11:], length)}])} if len(free) > 1 else {}
        if start != at(day, OPEN):
            failures["ignored_the_calendar"] = calendar_edit(add=[{**event, "start": at(day, OPEN),
                                                                    "end": at(day, OPEN, length)}])
        code = f"""from datetime import datetime, timedelta
busy = [(e['start'], e['end']) for e in call('GET', '/events') if e['start'].startswith({day!r})]
start = datetime.fromisoformat({at(day, OPEN)!r})
while True:
    begin, end = start.strftime('%Y-%m-%dT%H:%M'), (start + timedelta(minutes={length})).strftime('%Y-%m-%dT%H:%M')
    if not any(begin < b_end and end > b_start for b_start, b_end in busy):
        break
    start += timedelta(minutes=30)
call('POST', '/events', {{'title': {event['title']!r}, 'start': begin, 'end': end, 'location': {event['location']!r},
                         'attendees': {event['attendees']!r}}})
"""
        return TaskDraft(
            title=f"Book {event['title']!r} into the first free slot on {day}", instruction=instruction,
            spec=calendar_check(seeded, [event]), solution=solution(code),
            required_literals=[f"`{event['title']}`", day, f"{length}-minute", OPEN, CLOSE,
                               f"`{event['location']}`", *event["attendees"]],
            oracle=calendar_edit(add=[event]),
            failure_cases=strongest(failures, "ignored_the_calendar", "last_free_slot"),
            difficulty="hard",
            needed_actions=["run"])


class AcceptInvite(Family):
    """An emailed invitation: put the meeting it describes in the calendar, then reply to accept."""

    name = "claw.office.accept_invite"
    domain: ClassVar[Domain] = "claw"
    description = "Read an invitation email, add its meeting to the calendar and reply 'Accepted'."

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"message": rng.choice([m for m in inbox(state) if m.invitation]).message_id}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["message"], "properties": {
            "message": {"enum": [m.message_id for m in inbox(state) if m.invitation]}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        mail = by_mail_id(state, params.get("message"))
        if mail is None or mail.invitation is None:
            return f"{params.get('message')!r} is not the Message-ID of an invitation in the mailbox"
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        mail = by_mail_id(state, params["message"])
        assert mail is not None and mail.invitation is not None
        seeded, subject = events(state), f"Re: {mail.subject}"
        event: dict[str, Any] = {**mail.invitation, "attendees": [mail.sender]}
        instruction = (
            f"In your mailbox (the Maildir /var/mail/alex; you are Alex Morgan, {OWNER_ADDRESS}), "
            f"{describe(mail)} invites you to a meeting. Add that meeting to the team calendar with exactly the "
            f"title, start, end and location its Title:, When: and Where: lines give (start and end as "
            f"YYYY-MM-DDTHH:MM) and {mail.sender} as the only attendee. Then reply from {OWNER_ADDRESS} to "
            f"{mail.sender} only, with the subject `{subject}`, an In-Reply-To header holding that email's "
            f"Message-ID (angle brackets included) and a body containing the word `Accepted`. Leave every other "
            f"event as it is. {SERVICES} Send no other mail.")
        reply = sent(mail.sender, subject, "Accepted, see you there.\n", in_reply_to=mail.message_id)
        other = next(m for m in inbox(state) if m.invitation and m.message_id != mail.message_id)
        assert other.invitation is not None
        wrong_end = {**event, "end": at(event["start"][:10], event["start"][11:], 60 + minutes_between(
            event["start"], event["end"]))}
        failures: dict[str, Effect] = {
            "event_only": calendar_edit(add=[event]), "reply_only": reply,
            "other_invitation": both(calendar_edit(add=[{**other.invitation, "attendees": [other.sender]}]), reply),
            "wrong_end": both(calendar_edit(add=[wrong_end]), reply)}
        code = f"""import re
original = next(m for m in inbox() if str(m["Subject"]) == {mail.subject!r})
text = original.get_body(("plain",)).get_content()
fields = dict(re.findall(r"^(Title|When|Where): (.+)$", text, re.M))
day, hours = fields["When"].split(" ")
begin, end = hours.split("-")
call('POST', '/events', {{'title': fields['Title'], 'start': day + 'T' + begin, 'end': day + 'T' + end,
                         'location': fields['Where'], 'attendees': [{mail.sender!r}]}})
send({mail.sender!r}, "Re: " + str(original["Subject"]), "Accepted, see you there.\\n",
     in_reply_to=str(original["Message-ID"]))
"""
        spec = {"type": "all", "checks": [calendar_check(seeded, [event]),
                                          mail_check(mail.sender, subject, ["Accepted"], in_reply_to=mail.message_id)]}
        return TaskDraft(
            title=f"Accept the invitation {mail.subject!r}", instruction=instruction, spec=spec,
            solution=solution(code),
            required_literals=[OWNER_ADDRESS, mail.sender, f"`{mail.subject}`", f"`{subject}`", "`Accepted`"],
            oracle=both(calendar_edit(add=[event]), reply),
            failure_cases=strongest(failures, "event_only", "reply_only", "other_invitation", "wrong_end"),
            difficulty="hard",
            needed_actions=["read", "search", "run"])
