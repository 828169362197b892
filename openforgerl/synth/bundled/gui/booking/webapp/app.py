"""The room-booking app: four meeting rooms, one-hour slots on five days, server-rendered, plus a JSON API.

    python3 app.py --port 0 --db /var/lib/webapp/app.db

Pages: / (rooms x days), /rooms/<id>?day=D (the day's schedule and the booking form),
/bookings/<id>/move, /answer. API: GET /api/rooms, GET /api/schedule?room=&day=,
GET/POST /api/bookings (?room=&day=&name=), DELETE /api/bookings/<id>, POST /api/bookings/<id>/move,
POST /api/answer. Every change goes through store.py.
"""

import store
import webkit
from webkit import api, button, esc, field, form, link, redirect, select

app = webkit.App("Room booking", [("/", "Rooms")])
TIMES = [(store.time_of(h), store.time_of(h)) for h in store.HOURS]
DAYS = [(d, d) for d in store.DAYS]


@app.route("GET", "/")
def index(request):
    rows = []
    for room in store.rooms(request.db):
        cells = [link(f"/rooms/{room['id']}?day={day}",
                      f"{sum(s['booked_by'] is None for s in store.schedule(request.db, room['name'], day))} free")
                 for day in store.DAYS]
        rows.append([esc(room["name"]), str(room["capacity"]), *cells])
    body = ("<p>Pick a room and a day to see its schedule and book a slot.</p>"
            + webkit.table(["Room", "Seats", *store.DAYS], rows, "Free one-hour slots"))
    return app.page("Room booking", body)


def _slot_row(room, day, slot):
    if slot["booked_by"] is None:
        return [slot["time"], "Free", ""]
    booking_id, who = slot["booking_id"], slot["booked_by"]
    what = f"{who} at {slot['time']}"
    actions = (button(f"/bookings/{booking_id}/cancel", "Cancel", f"Cancel booking: {what}") + " "
               + f'<a href="/bookings/{booking_id}/move" aria-label="Move booking: {esc(what)}">Move</a>')
    return [slot["time"], f"Booked by {esc(who)}", actions]


@app.route("GET", r"/rooms/(\d+)")
def room_page(request):
    room = next((r for r in store.rooms(request.db) if r["id"] == int(request.groups[0])), None)
    if room is None:
        raise webkit.Missing(f"there is no room {request.groups[0]}")
    day = request.query.get("day") if request.query.get("day") in store.DAYS else store.DAYS[0]
    days = " ".join(link(f"/rooms/{room['id']}?day={d}", d) for d in store.DAYS)
    slots = store.schedule(request.db, room["name"], day)
    book = form(f"/rooms/{room['id']}/book", select("Day", "day", DAYS, day) + select("Time", "time", TIMES)
                + field("Name", "name"), "Book", f"Book {room['name']}")
    body = (f"<p>Seats: {room['capacity']}. Days: {days}</p>"
            + webkit.table(["Time", "Booking", "Actions"], [_slot_row(room, day, s) for s in slots],
                           f"{room['name']} on {day}")
            + f"<h2>Book {esc(room['name'])}</h2>{book}")
    return app.page(room["name"], body)


@app.route("POST", r"/rooms/(\d+)/book")
def book(request):
    room = next((r for r in store.rooms(request.db) if r["id"] == int(request.groups[0])), None)
    if room is None:
        raise webkit.Missing(f"there is no room {request.groups[0]}")
    day = request.text("day")
    store.book(request.db, room["name"], day, request.text("time"), request.text("name"))
    return redirect(f"/rooms/{room['id']}?day={day}")


@app.route("POST", r"/bookings/(\d+)/cancel")
def cancel(request):
    booking = store.booking(request.db, int(request.groups[0]))
    store.cancel(request.db, booking["id"])
    return redirect(f"/rooms/{store.room_id(request.db, booking['room'])}?day={booking['day']}")


@app.route("GET", r"/bookings/(\d+)/move")
def move_page(request):
    booking = store.booking(request.db, int(request.groups[0]))
    inner = select("Day", "day", DAYS, booking["day"]) + select("Time", "time", TIMES, booking["time"])
    body = (f"<p>{esc(booking['name'])}'s booking of {esc(booking['room'])} on {booking['day']} at "
            f"{booking['time']}.</p>" + form(f"/bookings/{booking['id']}/move", inner, "Move booking", "Move"))
    return app.page("Move a booking", body)


@app.route("POST", r"/bookings/(\d+)/move")
def move(request):
    booking = store.booking(request.db, int(request.groups[0]))
    store.move(request.db, booking["id"], request.text("day"), request.text("time"))
    return redirect(f"/rooms/{store.room_id(request.db, booking['room'])}?day={request.text('day')}")


@app.route("GET", "/api/rooms")
def api_rooms(request):
    return api(store.rooms(request.db))


@app.route("GET", "/api/schedule")
def api_schedule(request):
    store.room_id(request.db, request.query.get("room", ""))
    return api(store.schedule(request.db, request.query.get("room"), request.query.get("day", "")))


@app.route("GET", "/api/bookings")
def api_bookings(request):
    query = request.query
    room, day, name = (query.get(key) or None for key in ("room", "day", "name"))
    return api(store.bookings(request.db, room, day, name))


@app.route("POST", "/api/bookings")
def api_book(request):
    booking_id = store.book(request.db, request.text("room"), request.text("day"), request.text("time"),
                            request.text("name"))
    return api(store.booking(request.db, booking_id), 201)


@app.route("DELETE", r"/api/bookings/(\d+)")
def api_cancel(request):
    store.cancel(request.db, int(request.groups[0]))
    return api({"cancelled": int(request.groups[0])})


@app.route("POST", r"/api/bookings/(\d+)/move")
def api_move(request):
    store.move(request.db, int(request.groups[0]), request.text("day"), request.text("time"))
    return api(store.booking(request.db, int(request.groups[0])))


if __name__ == "__main__":
    webkit.serve(app)
