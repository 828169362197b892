"""The booking app's starting data: always the same rooms and bookings (a fixed seed).

    python3 seed.py --root /        # at image build; --root DIR for a copy on another machine
"""

import random

import store
import webkit

SEED = 20270303
ROOMS = [("Aalto", 4), ("Bauhaus", 8), ("Corbusier", 12), ("Gropius", 20)]
PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Katherine Johnson", "Edsger Dijkstra", "Barbara Liskov",
          "Ken Thompson", "Dennis Ritchie"]
OCCUPANCY = 0.35


def populate(db):
    rng = random.Random(SEED)
    db.executemany("INSERT INTO rooms (name, capacity) VALUES (?, ?)", ROOMS)
    for room, _ in ROOMS:
        for day in store.DAYS:
            for hour in store.HOURS:
                if rng.random() < OCCUPANCY:
                    store.book(db, room, day, store.time_of(hour), rng.choice(PEOPLE))


if __name__ == "__main__":
    webkit.seed_main(store.SCHEMA, populate)
