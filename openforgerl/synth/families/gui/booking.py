"""Task families on the room-booking app: book a free slot, cancel a booking, move a booking to the first free
slot of another day, count a room's free slots (answer form).

A slot is (room, day, hour); each verifier checks the slots the task is about and that every other
booking is exactly as seeded.
"""

from __future__ import annotations

import random
import shlex
from pathlib import Path
from typing import Any

from openforgerl.synth.assets import Asset
from openforgerl.synth.families.gui.base import (
    NEEDED_ACTIONS,
    SOLVE_PRELUDE,
    GuiFamily,
    all_of,
    answer_check,
    app_module,
    check,
    column,
    curl,
    database,
    missing,
    query_param,
    record_answer,
    rows,
    sql_text,
    submit_answer,
)
from openforgerl.synth.family import Effect, TaskDraft

DAYS = ["2027-03-01", "2027-03-02", "2027-03-03", "2027-03-04", "2027-03-05"]
HOURS = list(range(9, 17))
BOOKERS = ["Mary Somerville", "Hedy Lamarr", "Claude Shannon", "Radia Perlman", "Frances Allen", "Donald Knuth",
           "Margaret Hamilton", "Sophie Wilson"]
JOIN = "FROM bookings b JOIN rooms r ON r.id = b.room_id"
DESCRIPTION = "room-booking"
Slot = tuple[str, str, int]
"""(room, day, hour)"""


def time_of(hour: int) -> str:
    return f"{hour:02d}:00"


def room_names(state: Path) -> list[str]:
    return column(state, "SELECT name FROM rooms ORDER BY id")


def booked(state: Path) -> dict[Slot, str]:
    """Every booked slot -> who booked it, in the app's order."""
    return {(str(room), str(day), int(hour)): str(name)
            for room, day, hour, name in rows(state, f"SELECT r.name, b.day, b.hour, b.name {JOIN} "
                                                     "ORDER BY r.id, b.day, b.hour")}


def free_hours(state: Path, room: str, day: str) -> list[int]:
    taken = booked(state)
    return [hour for hour in HOURS if (room, day, hour) not in taken]


def is_slot(room: str, day: str, hour: int) -> str:
    return f"(r.name = {sql_text(room)} AND b.day = {sql_text(day)} AND b.hour = {int(hour)})"


def who_is_at(slot: Slot, name: str | None) -> dict[str, Any]:
    label = "slot_" + "_".join([slot[1].replace("-", ""), str(slot[2])])
    return check(label, f"SELECT b.name {JOIN} WHERE {is_slot(*slot)}", [[name]] if name else [])


def others_unchanged(state: Path, *slots: Slot) -> dict[str, Any]:
    """Every booking outside ``slots`` as seeded."""
    query = (f"SELECT r.name, b.day, b.hour, b.name {JOIN} WHERE NOT ({' OR '.join(is_slot(*s) for s in slots)}) "
             "ORDER BY r.id, b.day, b.hour")
    return check("other_bookings_unchanged", query, rows(state, query))


def parse_time(value: Any) -> int | None:
    text = str(value)
    if len(text) == 5 and text.endswith(":00") and text[:2].isdigit() and int(text[:2]) in HOURS:
        return int(text[:2])
    return None


class BookingFamily(GuiFamily):
    app = "booking"

    def change(self, asset: Asset, action: Any) -> Effect:
        """An effect that runs ``action(store, db)`` on the host copy, as one request would."""
        def effect(root: Path) -> None:
            with database(root) as db:
                action(app_module(asset, "store"), db)
        return effect

    def book(self, asset: Asset, slot: Slot, name: str) -> Effect:
        room, day, hour = slot
        return self.change(asset, lambda s, db: s.book(db, room, day, time_of(hour), name))

    def cancel(self, asset: Asset, *slots: Slot) -> Effect:
        def action(store: Any, db: Any) -> None:
            for room, day, hour in slots:
                store.cancel(db, store.booking_at(db, room, day, time_of(hour)))
        return self.change(asset, action)

    def move(self, asset: Asset, slot: Slot, to: Slot) -> Effect:
        room, day, hour = slot
        return self.change(asset, lambda s, db: s.move(db, s.booking_at(db, room, day, time_of(hour)), to[1],
                                                       time_of(to[2])))

    def check_slot(self, params: dict[str, Any], state: Path, *, free: bool) -> str | None:
        room, day, hour = params.get("room"), params.get("day"), parse_time(params.get("time"))
        if room not in room_names(state):
            return missing("room", room, room_names(state))
        if day not in DAYS:
            return missing("bookable day", day, DAYS)
        if hour is None:
            return f"the time {params.get('time')!r} is not a slot start from 09:00 to 16:00 (HH:00)"
        if free != ((room, day, hour) not in booked(state)):
            return f"{room} is {'already booked' if free else 'not booked'} on {day} at {time_of(hour)}"
        return None

    def slot_schema(self, state: Path) -> dict[str, Any]:
        return {"room": {"enum": room_names(state)}, "day": {"enum": DAYS},
                "time": {"enum": [time_of(h) for h in HOURS]}}


def then(*effects: Effect) -> Effect:
    def effect(root: Path) -> None:
        for one in effects:
            one(root)
    return effect


def other_free_slot(state: Path, near: Slot, exclude: tuple[Slot, ...] = ()) -> Slot:
    """A free slot other than ``near`` and ``exclude``: the same room and day if possible, else any."""
    room, day, _ = near
    candidates = [(room, day, h) for h in free_hours(state, room, day)]
    candidates += [(r, d, h) for r in room_names(state) for d in DAYS for h in free_hours(state, r, d)]
    return next(s for s in candidates if s != near and s not in exclude)


class BookSlot(BookingFamily):
    """Book a free slot of a room for someone."""

    name = "gui.booking.book"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        room, day = rng.choice(room_names(state)), rng.choice(DAYS)
        return {"room": room, "day": day, "time": time_of(rng.choice(free_hours(state, room, day))),
                "name": rng.choice(BOOKERS), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["room", "day", "time", "name"],
                "properties": {**self.slot_schema(state), "name": {"type": "string", "minLength": 2, "maxLength": 60}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        name = params.get("name")
        if not isinstance(name, str) or not 2 <= len(name) <= 60 or name != " ".join(name.split()):
            return f"the name {name!r} must be 2 to 60 characters on one line"
        return self.check_slot(params, state, free=True)

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        room, day, time, name = params["room"], params["day"], params["time"], params["name"]
        slot: Slot = (room, day, int(time[:2]))
        wording = [f"Book the room {room} on {day} at {time} for {name}.",
                   f"{name} needs the room {room} for an hour on {day}, starting {time}: book it under their name."
                   ][self.wording(params)]
        spec = all_of(who_is_at(slot, name), others_unchanged(state, slot))
        elsewhere = other_free_slot(state, slot)
        other_room = next(((r, day, slot[2]) for r in room_names(state)
                           if r != room and (r, day, slot[2]) not in booked(state)), elsewhere)
        solution = SOLVE_PRELUDE + curl("POST", "api/bookings", {"room": room, "day": day, "time": time,
                                                                  "name": name}) + "\n"
        return TaskDraft(
            title=f"Book {room} on {day} at {time}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[room, day, time, name], solution=solution, oracle=self.book(asset, slot, name),
            failure_cases={"other_time": self.book(asset, elsewhere, name),
                           "other_room": self.book(asset, other_room, name),
                           "other_name": self.book(asset, slot, next(b for b in BOOKERS if b != name)),
                           "booked_twice": then(self.book(asset, slot, name), self.book(asset, elsewhere, name))},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class CancelBooking(BookingFamily):
    """Cancel one booking, named by room, day, time and who made it."""

    name = "gui.booking.cancel"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        room, day, hour = rng.choice(list(booked(state)))
        return {"room": room, "day": day, "time": time_of(hour), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["room", "day", "time"], "properties": self.slot_schema(state)}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        return self.check_slot(params, state, free=False)

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        room, day, time = params["room"], params["day"], params["time"]
        slot: Slot = (room, day, int(time[:2]))
        name = booked(state)[slot]
        wording = [f"Cancel {name}'s booking of the room {room} on {day} at {time}.",
                   f"{name} will not need the room {room} on {day} at {time} after all: cancel that booking."
                   ][self.wording(params)]
        spec = all_of(who_is_at(slot, None), others_unchanged(state, slot))
        other = next(s for s in booked(state) if s != slot)
        solution = (SOLVE_PRELUDE + f"id=$({curl('GET', f'api/bookings?room={query_param(room)}&day={day}')} "
                    f"| jq -r --arg time {time} '.[] | select(.time == $time) | .id')\n"
                    '[ -n "$id" ] || { echo "no such booking" >&2; exit 1; }\n'
                    + curl("DELETE", "api/bookings/$id") + "\n")
        return TaskDraft(
            title=f"Cancel {name}'s booking of {room}", instruction=f"{self.where(DESCRIPTION)} {wording}", spec=spec,
            required_literals=[name, room, day, time], solution=solution, oracle=self.cancel(asset, slot),
            failure_cases={"cancelled_other": self.cancel(asset, other),
                           "moved_instead": self.move(asset, slot, other_free_slot(state, slot)),
                           "cancelled_two": self.cancel(asset, slot, other)},
            difficulty="easy", needed_actions=NEEDED_ACTIONS)


class RescheduleToFirstFree(BookingFamily):
    """Move a booking to the earliest free slot of the same room on another day (a look-up, then a change)."""

    name = "gui.booking.reschedule"
    phrasings = 2

    def targets(self, state: Path, room: str, day: str) -> list[str]:
        """Days other than ``day`` on which ``room`` has two free slots or more."""
        return [d for d in DAYS if d != day and len(free_hours(state, room, d)) >= 2]

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        movable = [s for s in booked(state) if self.targets(state, s[0], s[1])]
        room, day, hour = rng.choice(movable)
        return {"room": room, "day": day, "time": time_of(hour), "new_day": rng.choice(self.targets(state, room, day)),
                "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["room", "day", "time", "new_day"],
                "properties": {**self.slot_schema(state), "new_day": {"enum": DAYS}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        problem = self.check_slot(params, state, free=False)
        if problem is None and params.get("new_day") not in self.targets(state, params["room"], params["day"]):
            return (f"the new day {params.get('new_day')!r} must be another of {', '.join(DAYS)} on which "
                    f"{params['room']} has at least two free slots")
        return problem

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        room, day, time, new_day = params["room"], params["day"], params["time"], params["new_day"]
        slot: Slot = (room, day, int(time[:2]))
        name = booked(state)[slot]
        first, second = free_hours(state, room, new_day)[:2]
        target: Slot = (room, new_day, first)
        wording = [f"Move {name}'s booking of the room {room} on {day} at {time} to the earliest free time of the "
                   f"same room on {new_day}.",
                   f"{name} has the room {room} on {day} at {time}. Reschedule that booking to {new_day}, at the "
                   "first hour the room is still free that day."][self.wording(params)]
        spec = all_of(who_is_at(target, name), who_is_at(slot, None), others_unchanged(state, slot, target))
        other_day = next(d for d in self.targets(state, room, day) if d != new_day) \
            if len(self.targets(state, room, day)) > 1 else None
        wrong_day: Slot = (room, other_day, free_hours(state, room, other_day)[0]) if other_day else (room, new_day,
                                                                                                     second)
        schedule = curl("GET", f"api/schedule?room={query_param(room)}&day={new_day}")
        solution = (SOLVE_PRELUDE
                    + f"free=$({schedule} | jq -r '[.[] | select(.booked_by == null)][0].time')\n"
                    + f"id=$({curl('GET', f'api/bookings?room={query_param(room)}&day={day}')} "
                    f"| jq -r --arg time {time} '.[] | select(.time == $time) | .id')\n"
                    '[ -n "$id" ] || { echo "no such booking" >&2; exit 1; }\n'
                    f"jq -n --arg day {shlex.quote(new_day)} --arg time \"$free\" '{{day: $day, time: $time}}' | "
                    "curl -fsS -X POST -H 'Content-Type: application/json' --data-binary @- "
                    '"${url}api/bookings/$id/move"\n')
        return TaskDraft(
            title=f"Move {name}'s booking of {room} to {new_day}", instruction=f"{self.where(DESCRIPTION)} {wording}",
            spec=spec, required_literals=[name, room, day, time, new_day], solution=solution,
            oracle=self.move(asset, slot, target),
            failure_cases={"second_free_slot": self.move(asset, slot, (room, new_day, second)),
                           "other_day": self.move(asset, slot, wrong_day),
                           "copied_not_moved": self.book(asset, target, name),
                           "cancelled_only": self.cancel(asset, slot)},
            difficulty="medium", needed_actions=NEEDED_ACTIONS)


class CountFreeSlots(BookingFamily):
    """How many slots of a room are free on a day: answered on the Answer page."""

    name = "gui.booking.count_free"
    phrasings = 2

    def sample(self, rng: random.Random, asset: Asset, state: Path) -> dict[str, Any]:
        return {"room": rng.choice(room_names(state)), "day": rng.choice(DAYS), "phrasing": self.pick_phrasing(rng)}

    def params_schema(self, asset: Asset, state: Path) -> dict[str, Any]:
        return {"type": "object", "required": ["room", "day"],
                "properties": {"room": {"enum": room_names(state)}, "day": {"enum": DAYS}}}

    def check_params(self, params: dict[str, Any], asset: Asset, state: Path) -> str | None:
        if params.get("room") not in room_names(state):
            return missing("room", params.get("room"), room_names(state))
        if params.get("day") not in DAYS:
            return missing("bookable day", params.get("day"), DAYS)
        return None

    def render(self, params: dict[str, Any], asset: Asset, state: Path) -> TaskDraft:
        room, day = params["room"], params["day"]
        free = free_hours(state, room, day)
        wording = [f"How many one-hour slots (09:00 to 16:00 starts) of the room {room} are still free on {day}?",
                   f"Count the free one-hour slots of the room {room} on {day}."][self.wording(params)]
        instruction = (f"{self.where(DESCRIPTION)} {wording} Submit just the number on the app's Answer page "
                       "(only your latest answer counts).")
        every = f"SELECT r.name, b.day, b.hour, b.name {JOIN} ORDER BY r.id, b.day, b.hour"
        spec = all_of(answer_check(str(len(free))), check("bookings_unchanged", every, rows(state, every)))
        wrong = len(HOURS) - len(free) if len(HOURS) - len(free) != len(free) else len(free) + 1

        def say(text: str) -> Effect:
            return lambda root: record_answer(root, asset, text)

        solution = (SOLVE_PRELUDE + f"n=$({curl('GET', f'api/schedule?room={query_param(room)}&day={day}')} "
                    "| jq '[.[] | select(.booked_by == null)] | length')\n" + submit_answer("n"))
        some_free = other_free_slot(state, (room, day, -1))
        return TaskDraft(
            title=f"Count the free slots of {room} on {day}", instruction=instruction, spec=spec,
            required_literals=[room, day], solution=solution, oracle=say(str(len(free))),
            failure_cases={"booked_count": say(str(wrong)),
                           "right_but_booked": then(say(str(len(free))), self.book(asset, some_free, BOOKERS[0]))},
            difficulty="medium", needed_actions=NEEDED_ACTIONS)
