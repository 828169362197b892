"""The room-booking app's data: rooms, one-hour bookings on five fixed days, and every change the app makes.

The HTTP handlers (app.py), the seed (seed.py) and the task families' host effects all change the
database through these functions, so a task's reference effect is exactly what the app would do.
"""

SCHEMA = """
CREATE TABLE rooms (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, capacity INTEGER NOT NULL);
CREATE TABLE bookings (
  id INTEGER PRIMARY KEY,
  room_id INTEGER NOT NULL REFERENCES rooms(id),
  day TEXT NOT NULL,
  hour INTEGER NOT NULL CHECK (hour BETWEEN 9 AND 16),
  name TEXT NOT NULL,
  UNIQUE (room_id, day, hour)
);
"""
DAYS = ["2027-03-01", "2027-03-02", "2027-03-03", "2027-03-04", "2027-03-05"]
HOURS = list(range(9, 17))
"""Bookable one-hour slots start at 09:00 ... 16:00."""
BOOKING = ("SELECT b.id, r.name AS room, b.day, b.hour, b.name FROM bookings b JOIN rooms r ON r.id = b.room_id "
           "WHERE (:room IS NULL OR r.name = :room) AND (:day IS NULL OR b.day = :day) "
           "AND (:name IS NULL OR b.name = :name) AND (:id IS NULL OR b.id = :id) ORDER BY r.id, b.day, b.hour")


def time_of(hour):
    return f"{hour:02d}:00"


def hour_of(time):
    """09:00, 9:00 or 9 -> 9; ValueError for anything that is not a bookable slot."""
    text = str(time).strip()
    hours, _, minutes = text.partition(":")
    if not hours.isdigit() or minutes not in ("", "00") or int(hours) not in HOURS:
        raise ValueError(f"{text!r} is not a bookable start time ({time_of(HOURS[0])} to {time_of(HOURS[-1])})")
    return int(hours)


def _day(day):
    day = str(day).strip()
    if day not in DAYS:
        raise ValueError(f"{day!r} is not a bookable day ({DAYS[0]} to {DAYS[-1]})")
    return day


def rooms(db):
    return [dict(row) for row in db.execute("SELECT id, name, capacity FROM rooms ORDER BY id")]


def room_id(db, name):
    row = db.execute("SELECT id FROM rooms WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise LookupError(f"there is no room {name!r}")
    return row[0]


def bookings(db, room=None, day=None, name=None, booking_id=None):
    found = db.execute(BOOKING, {"room": room, "day": day, "name": name, "id": booking_id})
    return [dict(row) | {"time": time_of(row["hour"])} for row in found]


def booking(db, booking_id):
    found = bookings(db, booking_id=booking_id)
    if not found:
        raise LookupError(f"there is no booking {booking_id}")
    return found[0]


def schedule(db, room, day):
    """Every slot of ``room`` on ``day``: time, and who booked it (None when free)."""
    taken = {b["hour"]: b for b in bookings(db, room=room, day=_day(day))}
    return [{"time": time_of(hour), "booked_by": taken[hour]["name"] if hour in taken else None,
             "booking_id": taken[hour]["id"] if hour in taken else None} for hour in HOURS]


def _free(db, rid, day, hour):
    row = db.execute("SELECT name FROM bookings WHERE room_id = ? AND day = ? AND hour = ?",
                     (rid, day, hour)).fetchone()
    if row is not None:
        raise ValueError(f"that slot ({day} {time_of(hour)}) is already booked by {row[0]}")


def book(db, room, day, time, name):
    name = " ".join(str(name).split())
    if not name:
        raise ValueError("the booking needs a name")
    rid, day, hour = room_id(db, room), _day(day), hour_of(time)
    _free(db, rid, day, hour)
    return db.execute("INSERT INTO bookings (room_id, day, hour, name) VALUES (?, ?, ?, ?)",
                      (rid, day, hour, name)).lastrowid


def cancel(db, booking_id):
    booking(db, booking_id)
    db.execute("DELETE FROM bookings WHERE id = ?", (booking_id,))


def move(db, booking_id, day, time):
    """The same booking (room and name) at another day and time of its room."""
    current = booking(db, booking_id)
    rid, day, hour = room_id(db, current["room"]), _day(day), hour_of(time)
    if (day, hour) != (current["day"], current["hour"]):
        _free(db, rid, day, hour)
    db.execute("UPDATE bookings SET day = ?, hour = ? WHERE id = ?", (day, hour, booking_id))


def booking_at(db, room, day, time):
    found = [b for b in bookings(db, room=room, day=day) if b["hour"] == hour_of(time)]
    if not found:
        raise LookupError(f"{room} is not booked on {day} at {time}")
    return found[0]["id"]
