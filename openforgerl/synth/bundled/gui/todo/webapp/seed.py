"""The to-do app's starting data: always the same items (a fixed seed), so tasks can be checked against it.

    python3 seed.py --root /        # at image build; --root DIR for a copy on another machine
"""

import random

import store
import webkit

SEED = 20270301
LISTS = ["Home", "Work", "Errands"]
TITLES = {
    "Home": ["Water the plants", "Fix the leaking tap", "Clean the gutters", "Sort the recycling",
             "Defrost the freezer", "Replace the smoke alarm battery", "Hang the new shelves"],
    "Work": ["Draft the quarterly report", "Review the budget sheet", "Book the team offsite",
             "Update the onboarding guide", "Prepare the board slides", "Answer the supplier survey"],
    "Errands": ["Pick up dry cleaning", "Return the library books", "Buy printer ink", "Renew the parking permit",
                "Collect the parcel", "Get the bike serviced"],
}
ITEMS_PER_LIST = 5


def populate(db):
    rng = random.Random(SEED)
    db.executemany("INSERT INTO lists (name) VALUES (?)", [(name,) for name in LISTS])
    items = []
    for name in LISTS:
        for title in rng.sample(TITLES[name], ITEMS_PER_LIST):
            due = f"2027-03-{rng.randrange(1, 29):02d}" if rng.random() < 0.7 else ""
            items.append((title, name, due, rng.random() < 0.3))
    rng.shuffle(items)
    for title, name, due, done in items:
        todo_id = store.add_todo(db, title, name, due)
        if done:
            store.update_todo(db, todo_id, done=True)


if __name__ == "__main__":
    webkit.seed_main(store.SCHEMA, populate)
